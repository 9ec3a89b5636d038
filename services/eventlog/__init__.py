"""eventlog: appends every node-local bus event to `<home>/eventlog/` with a size cap."""
