"""janitor: periodic clean-up (trace retention today)."""
