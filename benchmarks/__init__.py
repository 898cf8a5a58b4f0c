"""Quality benchmark scripts (not shipped): ``python -m benchmarks``."""
