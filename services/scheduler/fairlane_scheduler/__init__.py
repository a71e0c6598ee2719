"""Fairlane scheduler: places jobs on healthy GPUs from live scores; Postgres arbitrates."""
