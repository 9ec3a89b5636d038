"""Development tools (chaos soak, fuzzers, benchmarks), run as `python -m tools.X`; not in the wheel."""
