"""Where the cluster's model store answers (pure): `store_http_host`, else the store node's first
address from the state; a node that listens on loopback only reaches the store on loopback."""

from __future__ import annotations

from skulk.supervisor.model_store import ModelStoreConfig, same_name
from skulk.wire.state import State

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def store_url(store: ModelStoreConfig, state: State | None, advertise: str) -> str:
    host = store.store_http_host
    if not host and state is not None and advertise not in LOOPBACK:
        node = next((n for n in state.nodes.values() if n.node_id == store.store_host
                     or same_name(n.friendly_name, store.store_host)), None)
        host = node.addresses[0] if node and node.addresses else None
    return f"http://{host or '127.0.0.1'}:{store.store_port}"
