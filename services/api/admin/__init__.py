"""The routes that change the cluster or the node: placement and previews, instances, cancel,
config, restart, the store, model add, the tracing switch, other clusters."""
