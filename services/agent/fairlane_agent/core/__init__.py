"""The agent's pure parts: no asyncio, Kafka, NVML or clock (import-linter checks)."""
