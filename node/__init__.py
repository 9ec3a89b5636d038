"""What every process of a node shares beyond the wire: its configuration and keys, logging,
the roles' argument dataclasses, exit codes, on-disk formats (models, event log, traces,
staged copies) and metrics."""
