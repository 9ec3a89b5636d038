"""gossip: peer discovery and liveness across nodes (the protocol arrives with the cluster work)."""
