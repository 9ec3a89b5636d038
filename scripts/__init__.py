"""Operator tools: the `skulk` command line, admin client, tap, installers, benchmarks."""
