"""Fairlane's wire contract: topic names, record models, codec and JSON Schemas."""
