"""A process's replica of the cluster state: snapshot, then the indexed events (zguide Clone).

`ReplicaCore` is the logic without sockets or threads: it takes the bus's state messages and the
local master's snapshots, applies events strictly in order, and says when to ask for a snapshot
(at start, on a gap, a new session, or a `StateHead` ahead of it). A role with its own poll loop
(the worker) feeds it from that loop; `StateReplica` runs it in a daemon thread for the API's
gunicorn workers, whose request threads read an immutable `State` (never a half-applied one).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import zmq

from skulk.cluster.reducer import OutOfOrder, apply
from skulk.cluster.state import IndexedEvent, State, StateHead
from skulk.wire import endpoints
from skulk.wire.cluster import Membership
from skulk.wire.commands import SnapshotRequest, StateSnapshot
from skulk.wire.errors import WireError
from skulk.wire.refusals import Refusals
from skulk.wire.sockets import make_socket, recv, recv_published, send
from skulk.wire.topics import EVT_CLUSTER, EVT_STATE

log = logging.getLogger("skulk.replica")
REFUSALS = Refusals("replica: state frames", log)

SNAPSHOT_RETRY_S = 2.0
TOPICS = (EVT_STATE.prefix, EVT_CLUSTER.prefix)


class ReplicaCore:
    def __init__(self, on_change: Callable[[State], None] | None = None) -> None:
        self.state: State | None = None
        self.on_change = on_change or (lambda _state: None)
        self._buffer: list[IndexedEvent] = []
        self._asked_at: float | None = None
        self._behind_since: float | None = None
        self.members = 0  # live nodes per this node's gossip (may run ahead of the state)
        self._member_ids: frozenset[str] = frozenset()
        self.departed: frozenset[str] = frozenset()
        """Nodes this node's gossip knew and has since declared gone: a stream on one of them
        ends now, without waiting for the leader's `NodeTimedOut` to come back round."""

    def snapshot_due(self, now: float) -> bool:
        """Whether to send a `SnapshotRequest` now (the caller sends it)."""
        if self._asked_at is not None and now - self._asked_at > SNAPSHOT_RETRY_S:
            self._asked_at = None  # lost (master restarting): ask again
        if (self.state is None or self._behind_since is not None) and self._asked_at is None:
            self._asked_at = now
            return True
        return False

    def _set(self, state: State) -> None:
        self.state = state
        self.on_change(state)

    def on_snapshot(self, snap: State) -> None:
        self._asked_at = None
        state = snap
        for ev in sorted(self._buffer, key=lambda e: e.idx):
            if ev.session == state.session and ev.idx == state.last_event_applied_idx + 1:
                state = apply(state, ev)
        self._buffer.clear()
        self._behind_since = None
        self._set(state)

    def on_bus(self, msg: object) -> None:
        if isinstance(msg, Membership):
            ids = frozenset(m.info.node_id for m in msg.members)
            self.members = len(ids)
            self.departed = (self.departed | (self._member_ids - ids)) - ids
            self._member_ids = ids
            return
        state = self.state
        if isinstance(msg, IndexedEvent):
            if state is None or self._asked_at is not None:
                self._buffer.append(msg)
                return
            if msg.session != state.session or msg.idx > state.last_event_applied_idx + 1:
                self._behind_since = time.monotonic()
                self._buffer.append(msg)
                return
            if msg.idx == state.last_event_applied_idx + 1:
                try:
                    self._set(apply(state, msg))
                except OutOfOrder:
                    self._behind_since = time.monotonic()
        elif isinstance(msg, StateHead) and state is None:
            self._asked_at = None  # the master has a session now (it answered nothing before): ask at once
        elif isinstance(msg, StateHead) and state is not None and self._asked_at is None:
            if msg.session != state.session or msg.idx > state.last_event_applied_idx:
                self._behind_since = self._behind_since or time.monotonic()


def snapshot_request() -> SnapshotRequest:
    return SnapshotRequest(command_id=uuid.uuid4().hex)


class StateReplica:
    """`ReplicaCore` in a daemon thread with its own two sockets, for threaded readers."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._cond = threading.Condition()
        self.core = ReplicaCore(self._changed)
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="state-replica", daemon=True)
        self._thread.start()

    @property
    def members(self) -> int:
        return self.core.members

    @property
    def departed(self) -> frozenset[str]:
        return self.core.departed

    def _changed(self, _state: State) -> None:
        with self._cond:
            self._cond.notify_all()

    def get(self, timeout: float = 5.0) -> State | None:
        """The current state; waits up to `timeout` for the first snapshot, else None."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.core.state is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            return self.core.state

    def wait_change(self, after_idx: int, timeout: float) -> State | None:
        """Block until the state moves past `after_idx` or `timeout` passes."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.core.state is None or self.core.state.last_event_applied_idx <= after_idx:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self.core.state

    def _run(self) -> None:
        ctx: zmq.Context[Any] = zmq.Context.instance()
        sub = make_socket(ctx, zmq.SUB, hwm=100000, connect=endpoints.bus_out(self.run_dir), subscribe=TOPICS)
        dealer = make_socket(ctx, zmq.DEALER, connect=endpoints.master_local(self.run_dir))
        poller = zmq.Poller()
        poller.register(sub, zmq.POLLIN)
        poller.register(dealer, zmq.POLLIN)
        while True:
            if self.core.snapshot_due(time.monotonic()):
                send(dealer, snapshot_request(), flags=zmq.NOBLOCK)
            try:
                ready = dict(poller.poll(500))
            except zmq.ContextTerminated:  # the process is stopping
                return
            with self._cond:  # readers see whole updates only
                if sub in ready:
                    drain_bus(sub, self.core)
                if dealer in ready:
                    take_snapshot(dealer, self.core)


def drain_bus(sub: zmq.Socket[Any], core: ReplicaCore) -> None:
    try:
        for _ in range(1000):
            _topic, msg = recv_published(sub, flags=zmq.NOBLOCK)
            core.on_bus(msg)
    except zmq.Again:
        pass
    except WireError as exc:
        REFUSALS.refuse(_endpoint(sub), exc, time.monotonic())


def _endpoint(sock: zmq.Socket[Any]) -> str:
    return cast(bytes, sock.getsockopt(zmq.LAST_ENDPOINT)).decode(errors="replace")  # a bytes option


def take_snapshot(dealer: zmq.Socket[Any], core: ReplicaCore) -> None:
    try:
        msg = recv(dealer, flags=zmq.NOBLOCK)
    except (zmq.Again, WireError) as exc:
        if isinstance(exc, WireError):
            log.warning("replica: bad snapshot dropped: %s", exc)
        return
    if isinstance(msg, StateSnapshot):
        core.on_snapshot(msg.state)
