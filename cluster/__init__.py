"""The cluster's replicated state and what decides on it: the state and its events, the
reducer, placement, the catalog, and the API's threaded replica of the state. Its events are
wire messages (registered in `wire/registry.py`)."""
