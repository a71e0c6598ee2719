"""Fairlane node agent: reads GPU health and publishes one record per node per interval."""
