"""The A/B measurements behind current design choices in PERFORMANCE.md: `python -m benchmarks.NAME --help`."""
