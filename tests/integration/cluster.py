"""Several real nodes on one machine: each its own `--home`, loopback ports and process group,
joined by bootstrap peers in a namespace of their own. Waits are on real signals: every
re-check of the nodes' `/state` is triggered by a message on a node's bus (membership is
published every 0.25 s), under a deadline. Also: a placement waited for until every rank is
ready (`place_and_wait`), and a raw ZeroMQ client of a master's cluster port (`ask_leader`)."""

from __future__ import annotations

import time
import urllib.error
from typing import Any

import zmq

from skulk.wire import codec, curve
from skulk.wire.cluster import ReplayRequest
from skulk.wire.sockets import make_socket
from tests.integration.harness import Node, wait_until
from tests.integration.serving import http_json

FAST = {"cluster": {"discovery_port": 0}}


def node_args(namespace: str, peers: list[Node]) -> tuple[str, ...]:
    args = ("--namespace", namespace)
    if peers:
        args += ("--bootstrap-peers", ",".join(f"127.0.0.1:{p.cluster_port}" for p in peers))
    return args


def state_of(node: Node) -> dict[str, Any] | None:
    try:
        status, body = http_json(f"{node.url}/state", timeout=5)
    except (OSError, urllib.error.URLError):
        return None
    return body if status == 200 else None


def name_of(node: Node) -> str:
    """The node's name as its own /state shows it (`friendlyName`): nodes here are given no
    names, so the first of a cluster on this machine holds the host name, the others their
    derived names."""
    node_id = http_json(f"{node.url}/node_id")[1]
    return http_json(f"{node.url}/state")[1]["nodeIdentities"][node_id]["friendlyName"]


def converged(nodes: list[Node], count: int, same_idx: bool = False) -> dict[str, Any] | None:
    """When every node's /state lists `count` nodes and names the same master: that master."""
    states = [state_of(n) for n in nodes]
    if any(s is None for s in states):
        return None
    masters = {s["masterNodeId"] for s in states}  # type: ignore[index]
    if len(masters) != 1 or not next(iter(masters)):
        return None
    if any(len(s["nodeIdentities"]) != count for s in states):  # type: ignore[index]
        return None
    if same_idx and len({s["lastEventAppliedIdx"] for s in states}) != 1:  # type: ignore[index]
        return None
    return {"master": next(iter(masters)), "states": states}


def place_and_wait(via, everyone, body, timeout: float = 120) -> tuple[str, float, dict[str, Any]]:
    """Place `body` and wait until every runner of the instance is ready: the instance's id, the
    time it took and the instance. An instance that fails while it starts (a ring port another
    process took meanwhile, on a busy machine) is re-created by the leader under a new id, which
    its deletion note names (`replacedBy`): the wait follows it, and the id returned is the one
    that serves."""
    t0 = time.monotonic()
    status, reply = http_json(f"{via.url}/place_instance", body)
    assert status == 200, reply
    current = [reply["instance_id"]]

    def ready():
        state = state_of(everyone[0]) or {}
        deleted = state.get("deletedInstances") or {}
        while (successor := (deleted.get(current[0]) or {}).get("replacedBy")) and successor not in current:
            current.insert(0, successor)
        inst = state.get("instances", {}).get(current[0])
        if not inst:
            return None
        rids = next(iter(inst.values()))["shardAssignments"]["runnerToShard"]
        return all("RunnerReady" in state["runners"].get(r, {}) for r in rids) and inst

    inst = wait_until(everyone[0], ready, timeout, f"instance {body} ready")
    if len(current) > 1:
        print(f"placed {body}: re-created as {' <- '.join(current)} before it was ready")
    return current[0], time.monotonic() - t0, inst


ANSWER_MS = 5000
SILENT_MS = 2000


def ask_leader(port: int, keys: curve.ClusterKeys | None) -> object | None:
    """A replay request to a master's cluster port; its answer, or None when none came (nor
    could go: a client the server refused may have no connection left to queue the request on)."""
    ctx = zmq.Context()
    curve.configure(keys)
    try:
        sock = make_socket(ctx, zmq.DEALER, connect=f"tcp://127.0.0.1:{port}")
        try:
            sock.send(codec.encode(ReplayRequest(node_id="outsider", session="", since=-1)), zmq.NOBLOCK)
        except zmq.Again:
            return None
        return codec.decode(sock.recv()) if sock.poll(ANSWER_MS if keys else SILENT_MS) else None
    finally:
        curve.configure(None)
        ctx.destroy(linger=0)  # every socket closed first: `term` alone would wait on one left open
