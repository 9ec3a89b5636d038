"""`/v1/traces/cluster*`: the traces of every node, read through each reachable peer's API.

A traced task leaves its parts on each node that took part (a Pipeline x2 instance over two
nodes: rank 0's spans on one, rank 1's on the other), so unlike upstream's "first peer that has
it" the detail views merge the spans of every node that has any (identical spans once) and
answer 404 only when nobody has it. Peers are asked in parallel under one deadline
(`peers.py`); a peer that cannot answer is listed in `unreachableNodes`, never failing the call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import falcon

from skulk.cluster.replica import StateReplica
from skulk.node.trace_files import traces_root
from skulk.services.api.links.peers import Peer, PeerAnswer, ask_all, peers_of
from skulk.services.api.observe.trace_reader import list_traces, load_trace
from skulk.services.api.observe.trace_views import (
    chrome,
    clean_span,
    clean_summary,
    merge_nodes,
    merge_spans,
    merge_summaries,
    stats,
)
from skulk.services.api.observe.traces import checked_id, not_found, send_raw

STATE_WAIT_S = 1.0
"""How long a cluster view waits for a first state (a node just started); without one it shows
this node's traces alone."""


@dataclass
class Fanout:
    """The peers' answers to one path: those with a body (a 404 too: that peer has none), and
    the peers that could not answer, with the reason."""

    answers: list[PeerAnswer] = field(default_factory=list)
    unreachable: list[dict[str, str]] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # node id -> friendly name

    def refuse(self, peer: Peer, error: str) -> None:
        self.unreachable.append({"nodeId": peer.node_id, "url": peer.url,  # upstream's shape, plus the name
                                 "friendlyName": self.names.get(peer.node_id, peer.node_id), "error": error})


class ClusterTraces:
    """What the cluster views share: this node's traces and its peers' answers."""

    def __init__(self, home: Path, replica: StateReplica, node_id: str) -> None:
        self.root, self.replica, self.node_id = traces_root(home), replica, node_id

    def ask_peers(self, path: str) -> Fanout:
        state = self.replica.get(timeout=STATE_WAIT_S)
        out = Fanout(names={n: info.friendly_name for n, info in state.nodes.items()} if state else {})
        for answer in ask_all(peers_of(state, self.node_id), path):
            if answer.ok or answer.status == 404:
                out.answers.append(answer)
            else:
                out.refuse(answer.peer, answer.error)
        return out

    def trace(self, task_id: str) -> dict[str, Any]:
        """One task's spans merged over every node that has a part of it (404: nobody has)."""
        task_id = checked_id(task_id)
        fan = self.ask_peers(f"/v1/traces/{task_id}")
        local = load_trace(self.root, task_id)
        found = [local] if local else []
        for answer in fan.answers:
            body = answer.body
            if answer.ok and isinstance(body, dict) and isinstance(body.get("traces"), list):
                found.append({"traces": [s for s in map(clean_span, body["traces"]) if s is not None],
                              "sourceNodes": body.get("sourceNodes") or []})
            elif answer.ok:
                fan.refuse(answer.peer, "answered something that is not a trace")
        if not found:
            raise not_found(task_id)
        return {"taskId": task_id, "traces": merge_spans(*(f["traces"] for f in found)),
                "sourceNodes": merge_nodes(*(f["sourceNodes"] for f in found)), "unreachableNodes": fan.unreachable}


class ClusterTracesResource:
    """`GET /v1/traces/cluster`: every node's traces, one entry per task, newest first."""

    def __init__(self, cluster: ClusterTraces) -> None:
        self.cluster = cluster

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        fan = self.cluster.ask_peers("/v1/traces")
        lists = [list_traces(self.cluster.root)]
        for answer in fan.answers:
            body = answer.body
            if answer.ok and isinstance(body, dict) and isinstance(body.get("traces"), list):
                lists.append([e for e in map(clean_summary, body["traces"]) if e is not None])
            else:
                fan.refuse(answer.peer, answer.error or "answered something that is not a trace list")
        resp.media = {"traces": merge_summaries(*lists), "unreachableNodes": fan.unreachable}


class ClusterTraceResource:
    """`GET /v1/traces/cluster/{task_id}` (spans), `/stats` and `/raw`, over every node."""

    def __init__(self, cluster: ClusterTraces) -> None:
        self.cluster = cluster

    def on_get(self, req: falcon.Request, resp: falcon.Response, task_id: str) -> None:
        resp.media = self.cluster.trace(task_id)

    def on_get_stats(self, req: falcon.Request, resp: falcon.Response, task_id: str) -> None:
        trace = self.cluster.trace(task_id)
        resp.media = {**stats(task_id, trace["traces"], trace["sourceNodes"]),
                      "unreachableNodes": trace["unreachableNodes"]}

    def on_get_raw(self, req: falcon.Request, resp: falcon.Response, task_id: str) -> None:
        trace = self.cluster.trace(task_id)
        send_raw(resp, task_id, chrome(trace["traces"], trace["sourceNodes"],
                                       {"taskId": task_id, "unreachableNodes": trace["unreachableNodes"]}))
