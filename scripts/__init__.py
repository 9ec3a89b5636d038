"""Operator tools: the `skulk` command line, admin client, tap, model builders, service installers."""
