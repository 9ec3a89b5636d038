"""The unit tests' shared builders: a cluster state with the demo model placed, commands and
events applied through the real reducer (`run`, `placed`), a node's facts, the API's arguments
and a peer's hello from a newer protocol. Test modules import them from here, never from each
other; the builders of one subject live beside it (`master_sim.py`, `batcher_driver.py`,
`diagnostics_builders.py`, `supervisor_fakes.py`)."""

from __future__ import annotations

import itertools
from pathlib import Path

import msgpack

from skulk.cluster.placement import GIB
from skulk.cluster.reducer import apply
from skulk.cluster.state import (
    ChatMessage,
    IndexedEvent,
    NodeGatheredInfo,
    NodeInfo,
    RunnerStatus,
    RunnerStatusUpdated,
    State,
    TaskParams,
)
from skulk.node.role_args import ApiArgs
from skulk.services.master.commands import handle
from skulk.wire import codec
from skulk.wire.cluster import PeerHello
from skulk.wire.commands import PlaceInstance
from skulk.wire.models import ModelCard

# ---- a cluster's state (the reducer, routing, placement, the master's commands) -----------------

CARD = ModelCard(model_id="skulk/demo-tiny", storage_size_bytes=13_000_000, n_layers=4,
                 hidden_size=256, num_key_value_heads=2, supports_tensor=True,
                 context_length=2048, family="qwen2", quantization="float32")
PARAMS = TaskParams(model="skulk/demo-tiny", messages=(ChatMessage(role="user", content="hi"),),
                    max_tokens=4)


_COUNTER = itertools.count()


def ids():
    return lambda: f"{next(_COUNTER):032x}"


def run(state: State, events) -> State:
    for ev in events:
        state = apply(state, IndexedEvent(idx=state.last_event_applied_idx + 1, session="s", event=ev))
    return state


def node(node_id="n1", total=16 * GIB, available=12 * GIB) -> NodeInfo:
    return NodeInfo(node_id=node_id, friendly_name=f"host-{node_id}", skulk_version="t",
                    ram_total=total, ram_available=available, when=0.0)


def base() -> State:
    return run(State(session="s"), [NodeGatheredInfo(info=node())])


def placed(state: State | None = None, ready: bool = True) -> tuple[State, str, str]:
    state = state or base()
    out = handle(state, PlaceInstance(command_id="c1", card=CARD), ids(), 0.0)
    state = run(state, out.events)
    (iid,) = state.instances
    (rid,) = state.instances[iid].runner_to_shard
    if ready:
        state = run(state, [RunnerStatusUpdated(runner_id=rid, status=RunnerStatus(
            kind="RunnerReady", endpoint="tcp://127.0.0.1:1"))])
    return state, iid, rid


# ---- the API's arguments ------------------------------------------------------------------------

def api_args(node_id: str, home: Path) -> ApiArgs:
    return ApiArgs(port=0, node_id=node_id, keepalive=10.0, stall_timeout=120.0, config_file=str(home / "skulk.yaml"))


# ---- nodes on different versions ----------------------------------------------------------------

def info(node_id: str, version: str) -> NodeInfo:
    return NodeInfo(node_id=node_id, friendly_name=f"mac-{node_id}", skulk_version=version, ram_total=1,
                    ram_available=1, when=0.0)


def newer_hello(version: str = "9.9.9") -> bytes:
    hello = PeerHello(namespace="n", info=info("zz", version), gossip_port=1, master_port=2)
    env = msgpack.unpackb(codec.encode(hello), raw=False)
    env["v"] = PeerHello.VERSION + 1  # a protocol this build does not know
    return msgpack.packb(env, use_bin_type=True)
