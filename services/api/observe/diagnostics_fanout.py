"""The cluster-wide diagnostics routes: ask every other node's `/v1/diagnostics/node` at once
(`peers.ask_all`, one short deadline) and merge, or proxy one call to one node.

`GET /v1/diagnostics/cluster`, `GET /v1/diagnostics/cluster/timeline`,
`GET /v1/diagnostics/cluster/{node_id}` and
`POST /v1/diagnostics/cluster/{node_id}/runners/{runner_id}/cancel`. The peers asked are the
nodes of the replicated state plus those gossip saw live in the last minutes (the runner view
remembers them): a node that was just killed is already out of the state, and must show as
unreachable rather than vanish from the operator's page.
"""

from __future__ import annotations

import time
from urllib.parse import quote

import falcon

from skulk.cluster.state import State
from skulk.services.api.http.errors import http_error
from skulk.services.api.http.request_body import json_body
from skulk.services.api.links.peers import Peer, ask, ask_all, peers_of
from skulk.services.api.observe.diagnostics import (
    NodeCancelResource,
    NodeDiagnosticsSource,
    entries_param,
    parse_cancel,
)
from skulk.services.api.observe.diagnostics_cluster import NodeAnswer, cluster_json, node_answers, timeline_json
from skulk.services.api.observe.runner_view import RING

NODE_PATH = "/v1/diagnostics/node"


class ClusterFanOut:
    """This node's diagnostics and every peer's, the peers asked in parallel."""

    def __init__(self, source: NodeDiagnosticsSource, node_id: str) -> None:
        self.source, self.node_id = source, node_id

    def peers(self, state: State | None) -> tuple[list[Peer], dict[str, float]]:
        """Every other node to ask, and those of them no longer in the state (by when gossip
        last listed them)."""
        known = dict(state.nodes) if state else {}
        remembered = self.source.view.nodes()
        departed = {nid: at for nid, (_info, at) in remembered.items() if nid not in known and nid != self.node_id}
        nodes = {**{nid: remembered[nid][0] for nid in departed}, **known}
        return peers_of(State(nodes=nodes), self.node_id), departed

    def own_url(self, state: State | None) -> str | None:
        me = state.nodes.get(self.node_id) if state else None
        return next((p.url for p in peers_of(State(nodes={self.node_id: me}), "")), None) if me else None

    def gather(self, entries: int = RING) -> tuple[State | None, list[NodeAnswer]]:
        state = self.source.replica.get(timeout=1.0)
        peers, departed = self.peers(state)
        local = NodeAnswer(self.node_id, self.own_url(state), self.source.build(state, entries))
        answers = ask_all(peers, NODE_PATH + ("" if entries == RING else f"?entries={entries}"))
        return state, node_answers(local, answers, departed, time.time())

    def peer(self, node_id: str) -> Peer:
        """The peer to proxy to (404 when it is not a node this one knows)."""
        found = next((p for p in self.peers(self.source.replica.get(timeout=1.0))[0] if p.node_id == node_id), None)
        if found is None:
            raise http_error(404, f"Node diagnostics endpoint not reachable: {node_id}")
        return found


def master_of(state: State | None) -> str | None:
    return state.master_node_id if state and state.master_node_id else None


class ClusterDiagnosticsResource:
    def __init__(self, fan: ClusterFanOut) -> None:
        self.fan = fan

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        state, nodes = self.fan.gather(entries_param(req))
        resp.media = cluster_json(self.fan.node_id, master_of(state), nodes, time.time())


class TimelineResource:
    def __init__(self, fan: ClusterFanOut) -> None:
        self.fan = fan

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        state, nodes = self.fan.gather()
        resp.media = timeline_json(self.fan.node_id, master_of(state), nodes, time.time())


def relay(resp: falcon.Response, node_id: str, status: int, body: object, error: str) -> None:
    """A peer's answer as ours (its status passed through); 502 when there was none."""
    if status == 0 or body is None:
        raise http_error(502, f"Node diagnostics proxy to {node_id} failed: {error or 'empty answer'}")
    resp.status = falcon.code_to_http_status(status)
    resp.media = body


class ClusterNodeResource:
    """`GET /v1/diagnostics/cluster/{node_id}`: that node's `NodeDiagnostics`."""

    def __init__(self, fan: ClusterFanOut) -> None:
        self.fan = fan

    def on_get(self, req: falcon.Request, resp: falcon.Response, node_id: str) -> None:
        entries = entries_param(req)
        if node_id == self.fan.node_id:
            resp.media = self.fan.source.build(self.fan.source.replica.get(timeout=1.0), entries)
            return
        answer = ask(self.fan.peer(node_id), NODE_PATH + ("" if entries == RING else f"?entries={entries}"))
        relay(resp, node_id, answer.status, answer.body, answer.error)


class ClusterCancelResource:
    """`POST /v1/diagnostics/cluster/{node_id}/runners/{runner_id}/cancel`: the node's own cancel."""

    def __init__(self, fan: ClusterFanOut, local: NodeCancelResource) -> None:
        self.fan, self.local = fan, local

    def on_post(self, req: falcon.Request, resp: falcon.Response, node_id: str, runner_id: str) -> None:
        task_id = parse_cancel(json_body(req))
        if node_id == self.fan.node_id:
            resp.media = self.local.cancel(runner_id, task_id)
            return
        path = f"{NODE_PATH}/runners/{quote(runner_id, safe='')}/cancel"
        answer = ask(self.fan.peer(node_id), path, method="POST", body={"taskId": task_id})
        relay(resp, node_id, answer.status, answer.body, answer.error)
