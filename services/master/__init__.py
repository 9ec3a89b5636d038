"""master: election, event-sourced cluster state, placement and routing (filled in later)."""
