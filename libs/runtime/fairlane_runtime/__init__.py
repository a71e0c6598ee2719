"""Shared edges of the Fairlane services: settings base, logging, metrics, Kafka helpers."""
