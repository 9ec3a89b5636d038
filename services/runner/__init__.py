"""runner: one process per (instance, rank) placed on this node."""
