"""Asking the other nodes' APIs at once: cluster-wide reads that never fail on one peer.

The cluster views (`/v1/traces/cluster*`, `/v1/diagnostics/cluster*`, `/admin/clusters`) ask
every peer in the replicated state in parallel, each under one short deadline; a peer that
refuses, times out or answers garbage is reported as unreachable with the reason, and the
call still answers with what the others said. A peer's API address is the first of the
addresses it advertises with the port it advertises (`NodeInfo.api_port`). Each peer is asked
with the caller's own key (`FORWARDED`), so a cluster whose nodes share their `api.keys` answers
a cluster view, and no caller reaches through one node further than its key allows elsewhere.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from skulk.cluster.state import State

PEER_TIMEOUT_S = 2.0
"""A peer that has not answered in this long counts as unreachable (an operator's page must not
wait on a frozen node)."""
MAX_PEER_BODY = 32 << 20
FORWARDED: ContextVar[Mapping[str, str]] = ContextVar("skulk_peer_credentials", default=MappingProxyType({}))
"""The current request's credentials (`{"Authorization": "Bearer <key>"}`, or none), set for every
routed request by `auth.AuthMiddleware`; `ask` sends them to the peer."""


@dataclass(frozen=True)
class Peer:
    node_id: str
    url: str  # "http://host:port", no trailing slash


@dataclass(frozen=True)
class PeerAnswer:
    peer: Peer
    status: int  # HTTP status; 0 when no answer came
    body: Any = None  # the parsed JSON body (None when there was none or it did not parse)
    error: str = ""  # why there is no usable answer ("" when status is 2xx and body parsed)

    @property
    def ok(self) -> bool:
        return not self.error


def peers_of(state: State | None, self_id: str) -> list[Peer]:
    """Every other node of the state that advertises an API, sorted by node id."""
    if state is None:
        return []
    out = []
    for node_id, info in sorted(state.nodes.items()):
        if node_id == self_id or not info.api_port or not info.addresses:
            continue
        host = info.addresses[0]
        host = f"[{host}]" if ":" in host else host
        out.append(Peer(node_id, f"http://{host}:{info.api_port}"))
    return out


def ask(peer: Peer, path: str, timeout: float = PEER_TIMEOUT_S, method: str = "GET",
        body: Any = None, credentials: Mapping[str, str] | None = None) -> PeerAnswer:
    """One request to one peer; every failure becomes `PeerAnswer.error`, never an exception.
    `credentials`: the caller's (default: the current request's, `FORWARDED`)."""
    data = None if body is None else json.dumps(body).encode()
    headers = dict(FORWARDED.get() if credentials is None else credentials)
    if data:
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(peer.url + path, method=method, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - a peer's advertised URL
            raw = resp.read(MAX_PEER_BODY)
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(MAX_PEER_BODY), exc.code
    except (OSError, ValueError) as exc:  # refused, reset, timed out, bad URL
        return PeerAnswer(peer, 0, None, f"{type(exc).__name__}: {exc}")
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        return PeerAnswer(peer, status, None, f"HTTP {status}: not JSON")
    error = "" if 200 <= status < 300 else f"HTTP {status}"
    return PeerAnswer(peer, status, parsed, error)


def ask_all(peers: list[Peer], path: str, timeout: float = PEER_TIMEOUT_S, method: str = "GET",
            body: Any = None) -> list[PeerAnswer]:
    """`ask` every peer in parallel; all answers come back within about `timeout`, in the
    order of `peers` (a peer still silent at the deadline is reported as timed out)."""
    if not peers:
        return []
    credentials = FORWARDED.get()  # the pool's threads do not see the request's context
    pool = ThreadPoolExecutor(max_workers=min(16, len(peers)), thread_name_prefix="peer-ask")
    futures = [pool.submit(ask, p, path, timeout, method, body, credentials) for p in peers]
    wait(futures, timeout=timeout + 0.5)
    pool.shutdown(wait=False, cancel_futures=True)
    return [f.result() if f.done() else PeerAnswer(p, 0, None, f"no answer within {timeout:g} s")
            for p, f in zip(peers, futures)]
