"""The only zmq code of the API's request threads: commands to the master, streams from runners,
the supervisor's status (`GET /metrics`).

Sockets are thread-local (gthread: one socket, one thread). Commands use a REQ with Lazy
Pirate (poll with a deadline, retry once on a fresh socket; the master's replies are
idempotent by command id). A stream polls its runner's DEALER in short slices and checks the
state replica between them, so a runner that died, or an instance that was deleted, ends the
stream at once instead of waiting for a silence timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import zmq
from zmq.utils.monitor import recv_monitor_message

from skulk.cluster.replica import StateReplica
from skulk.cluster.state import SERVING_KINDS, RunnerKind, TaskParams
from skulk.services.api.generate.timing import KeepAlive, StreamTiming
from skulk.wire import endpoints
from skulk.wire.commands import INSTANCE_DELETED, INSTANCE_LOST, RUNNER_LOST, STREAM_STALLED, Reply
from skulk.wire.control import AdminCommand, AdminReply
from skulk.wire.errors import WireError
from skulk.wire.inference import (
    REFUSALS,
    Cancel,
    Done,
    Embed,
    Embeddings,
    Failed,
    FailReason,
    Generate,
    Progress,
    ProgressPhase,
    TokenChunk,
)
from skulk.wire.message import Message
from skulk.wire.sockets import make_socket, recv, send

COMMAND_TIMEOUT_S = 5.0
SLICE_S = 0.1
FIRST_TOKEN_S = 600.0
EXPLAIN_S = 0.3
LINK_EXPLAIN_S = 0.15
"""After a dropped link, a short wait for the state's cause (a local runner's exit code reaches
the replica in ~50 ms; a killed node's takes the gossip grace, too long to wait for)."""


class MasterUnavailable(RuntimeError):
    """No answer from the master within the command deadline."""


LINK_LOST = "connection to the runner closed"


def _link_dropped(monitor: zmq.Socket[Any]) -> bool:
    """Drain a DEALER's monitor; True when it reported the TCP link dropping."""
    dropped = False
    while True:
        try:
            event = recv_monitor_message(monitor, flags=zmq.NOBLOCK)
        except zmq.Again:
            return dropped
        dropped = dropped or event["event"] == zmq.EVENT_DISCONNECTED


def _own_reply(sock: zmq.Socket[Any], request_id: str) -> Message | None:
    """The next reply on a DEALER if it is this request's; None for a bad frame or an earlier
    request's leftover (a thread's DEALER serves its requests one after another)."""
    try:
        msg = recv(sock, flags=zmq.NOBLOCK)
    except (zmq.Again, WireError):
        return None
    return msg if getattr(msg, "request_id", None) == request_id else None


class Gateway:
    def __init__(self, run_dir: Path, replica: StateReplica, timing: StreamTiming) -> None:
        self.run_dir = run_dir
        self.replica = replica
        self.timing = timing
        self._local = threading.local()
        self.ctx: zmq.Context[Any] = zmq.Context.instance()

    # ---- master -----------------------------------------------------------------------------
    def command(self, cmd: Message, timeout: float = COMMAND_TIMEOUT_S) -> Reply:
        for _attempt in range(2):
            sock = getattr(self._local, "req", None)
            if sock is None:
                sock = make_socket(self.ctx, zmq.REQ, connect=endpoints.master_local(self.run_dir))
                self._local.req = sock
            send(sock, cmd)
            if sock.poll(int(timeout * 1000), zmq.POLLIN):
                try:
                    return cast(Reply, recv(sock))  # the master's REP answers every command with a Reply
                except WireError as exc:
                    raise MasterUnavailable(f"bad reply from the master: {exc}") from None
            sock.close(0)  # REQ is stuck after a lost reply: reopen (Lazy Pirate)
            self._local.req = None
        raise MasterUnavailable("the master did not answer in time; please retry")

    def tell(self, cmd: Message) -> None:
        """Send a bookkeeping command (task finished or cancelled) without waiting: the client's
        answer must never wait on the master (which may be the node that just died)."""
        sock = getattr(self._local, "teller", None)
        if sock is None:
            sock = make_socket(self.ctx, zmq.DEALER, hwm=1000, connect=endpoints.master_local(self.run_dir))
            self._local.teller = sock
        while sock.poll(0, zmq.POLLIN):  # earlier replies, unread by design
            sock.recv_multipart(zmq.NOBLOCK)
        try:
            send(sock, cmd, flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # the master is away: the task is only bookkeeping once the client has its answer

    # ---- supervisor ---------------------------------------------------------------------------
    def supervisor_status(self, timeout: float = 1.0) -> AdminReply | None:
        """This node's process tree as `skulk admin status` shows it (None: no answer in time).
        One short-lived REQ per call: it serves an occasional scrape, never a request path."""
        sock = make_socket(self.ctx, zmq.REQ, connect=endpoints.supervisor_control(self.run_dir))
        try:
            send(sock, AdminCommand(verb="status"))
            if not sock.poll(int(timeout * 1000), zmq.POLLIN):
                return None
            reply = recv(sock)
            return reply if isinstance(reply, AdminReply) else None
        except WireError:
            return None
        finally:
            sock.close(0)

    # ---- runners ----------------------------------------------------------------------------
    def _dealer(self, endpoint: str) -> tuple[zmq.Socket[Any], zmq.Socket[Any]]:
        """This thread's DEALER to a runner and the monitor that reports its TCP link dropping
        (the runner's process, or its whole node, is gone: no need to wait for the state)."""
        socks: dict[str, tuple[zmq.Socket[Any], zmq.Socket[Any]]] = getattr(self._local, "dealers", None) or {}
        self._local.dealers = socks
        if endpoint not in socks:
            sock = make_socket(self.ctx, zmq.DEALER, hwm=100000, connect=endpoint)
            socks[endpoint] = (sock, sock.get_monitor_socket(zmq.EVENT_DISCONNECTED))
        return socks[endpoint]

    def _forget(self, endpoint: str) -> None:
        """That runner is gone for good (a new incarnation gets a new endpoint): close this
        thread's sockets to it, or zmq would keep reconnecting to a dead port forever."""
        socks = getattr(self._local, "dealers", None) or {}
        if endpoint in socks:
            sock, monitor = socks.pop(endpoint)
            sock.disable_monitor()
            monitor.close(0)
            sock.close(0)

    def cancel(self, endpoint: str, request_id: str) -> None:
        try:
            send(self._dealer(endpoint)[0], Cancel(request_id=request_id), flags=zmq.NOBLOCK)
        except zmq.ZMQError:
            pass

    def cancel_once(self, endpoint: str, request_id: str) -> None:
        """`Cancel` from a thread that does not stream from that runner (`POST /v1/cancel`): a
        one-shot socket, so no thread keeps a DEALER reconnecting to a runner it never reads."""
        sock = make_socket(self.ctx, zmq.DEALER, connect=endpoint)
        try:
            send(sock, Cancel(request_id=request_id), flags=zmq.NOBLOCK)
        except zmq.ZMQError:
            pass
        finally:
            sock.close(linger=1000)  # a second to deliver it, then gone

    def _send(self, endpoint: str, msg: Message) -> tuple[zmq.Socket[Any], zmq.Socket[Any], zmq.Poller]:
        """Send a request to a runner on this thread's DEALER; its poller watches the replies
        and the link monitor (an earlier incarnation's drop says nothing about this request)."""
        sock, monitor = self._dealer(endpoint)
        _link_dropped(monitor)
        send(sock, msg)
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        return sock, monitor, poller

    def stream(self, endpoint: str, request_id: str, task_id: str, instance_id: str,
               runner_id: str, params: TaskParams, context_limit: int = 0,
               default_max_tokens: bool = False, trace: bool = False) -> Iterator[Message | KeepAlive]:
        """Started / Progress / TokenChunk ... then exactly one Done or Failed (or KeepAlive)."""
        sock, monitor, poller = self._send(endpoint, Generate(
            request_id=request_id, task_id=task_id, params=params, context_limit=context_limit,
            default_max_tokens=default_max_tokens, trace=trace))
        now = time.monotonic()
        last_msg = last_out = now
        first_by = now + FIRST_TOKEN_S
        got_token = False
        next_check = now + SLICE_S
        while True:
            ready = dict(poller.poll(int(SLICE_S * 1000)))
            if sock in ready:
                if (msg := _own_reply(sock, request_id)) is not None:
                    last_msg = time.monotonic()
                    queued = isinstance(msg, Progress) and msg.phase == ProgressPhase.QUEUED
                    if not queued:  # a queued request's keep-alive: the client sees nothing of it
                        last_out = last_msg
                    if isinstance(msg, TokenChunk):
                        got_token = True
                    if isinstance(msg, Failed) and msg.reason not in REFUSALS \
                            and msg.reason != FailReason.CANCELLED:  # the runner's verdict is no symptom
                        msg = self._explain(msg, instance_id, runner_id, endpoint)
                    yield msg
                    if isinstance(msg, (Done, Failed)):
                        return
            elif monitor in ready and _link_dropped(monitor):  # its output is drained first
                self._forget(endpoint)
                yield self._explain(Failed(request_id=request_id, error=RUNNER_LOST.format(detail=LINK_LOST),
                                           reason=FailReason.RUNNER_FAILED),
                                    instance_id, runner_id, endpoint, wait_s=LINK_EXPLAIN_S)
                return
            now = time.monotonic()
            if now < next_check:
                continue
            next_check = now + SLICE_S  # the state is consulted every slice, busy or not
            lost = self._lost(instance_id, runner_id, endpoint)
            if lost:
                self._forget(endpoint)
                yield Failed(request_id=request_id, reason=lost[0], error=lost[1])
                return
            if got_token and now - last_msg > self.timing.stall_s:
                self.cancel(endpoint, request_id)  # nobody will read the rest
                yield Failed(request_id=request_id, reason=FailReason.STALLED,
                             error=STREAM_STALLED.format(seconds=self.timing.stall_s))
                return
            if not got_token and now > first_by:
                self.cancel(endpoint, request_id)
                yield Failed(request_id=request_id, reason=FailReason.NO_OUTPUT,
                             error=f"No output within {FIRST_TOKEN_S:.0f}s")
                return
            if now - last_out >= self.timing.keepalive_s:
                last_out = now
                yield KeepAlive()

    def embed(self, endpoint: str, request_id: str, task_id: str, instance_id: str, runner_id: str,
              inputs: tuple[str, ...], dimensions: int = 0, idle_s: float = FIRST_TOKEN_S) -> Embeddings | Failed:
        """Send one `Embed` and gather its parts into one `Embeddings` (all inputs, in order), or
        the `Failed`: the runner's, its loss (link, state, checked every slice as `stream`
        does), or `idle_s` without a part (it may be queued behind other requests)."""
        sock, monitor, poller = self._send(endpoint, Embed(request_id=request_id, task_id=task_id,
                                                           inputs=inputs, dimensions=dimensions))
        parts: dict[int, Embeddings] = {}
        last = next_check = time.monotonic()
        while True:
            ready = dict(poller.poll(int(SLICE_S * 1000)))
            if sock in ready:
                if (msg := _own_reply(sock, request_id)) is None:
                    continue
                last = time.monotonic()
                if isinstance(msg, Failed):
                    lost = msg.reason not in REFUSALS and msg.reason != FailReason.CANCELLED
                    return self._explain(msg, instance_id, runner_id, endpoint) if lost else msg
                if isinstance(msg, Embeddings):
                    parts[msg.start] = msg
                    if sum(len(p.vectors) for p in parts.values()) >= len(inputs):
                        ordered = [parts[k] for k in sorted(parts)]
                        return Embeddings(request_id=request_id, start=0,
                                          vectors=tuple(v for p in ordered for v in p.vectors),
                                          prompt_tokens=sum(p.prompt_tokens for p in ordered))
            elif monitor in ready and _link_dropped(monitor):
                self._forget(endpoint)
                return self._explain(Failed(request_id=request_id, error=RUNNER_LOST.format(detail=LINK_LOST),
                                            reason=FailReason.RUNNER_FAILED),
                                     instance_id, runner_id, endpoint, wait_s=LINK_EXPLAIN_S)
            now = time.monotonic()
            if now < next_check:
                continue
            next_check = now + SLICE_S
            if lost_why := self._lost(instance_id, runner_id, endpoint):
                self._forget(endpoint)
                return Failed(request_id=request_id, reason=lost_why[0], error=lost_why[1])
            if now - last > idle_s:
                self.cancel(endpoint, request_id)
                return Failed(request_id=request_id, reason=FailReason.NO_OUTPUT,
                              error=f"No embeddings from the runner within {idle_s:.0f}s")

    def _explain(self, failed: Failed, instance_id: str, runner_id: str, endpoint: str,
                 wait_s: float = EXPLAIN_S) -> Failed:
        """A runner's own error is often a symptom (a peer rank was stopped because the instance
        was deleted): give the state up to `wait_s` to catch up and prefer its cause."""
        deadline = time.monotonic() + wait_s
        while True:
            lost = self._lost(instance_id, runner_id, endpoint)
            if lost:
                return Failed(request_id=failed.request_id, reason=lost[0], error=lost[1],
                              retryable=failed.retryable)
            left = deadline - time.monotonic()
            state = self.replica.get(timeout=0)
            if left <= 0 or state is None:
                return failed
            self.replica.wait_change(state.last_event_applied_idx, left)

    def _lost(self, instance_id: str, runner_id: str, endpoint: str) -> tuple[FailReason, str] | None:
        """Why this stream can no longer complete, or None while its runner still serves it.

        Checked by incarnation, not only by status: a runner that crashed and was restarted
        (same id, new process, new endpoint) cannot finish a request the old one started.
        """
        state = self.replica.get(timeout=0)
        if state is None:
            return None
        runner_lost = FailReason.RUNNER_FAILED
        inst = state.instances.get(instance_id)
        if inst is None:
            note = state.deleted.get(instance_id)
            cause = note.cause if note else ""
            if cause == "operator":
                return FailReason.INSTANCE_DELETED, INSTANCE_DELETED
            if note and cause in ("runner_failed", "engine_refused"):  # deleted to be re-created
                return runner_lost, RUNNER_LOST.format(detail=note.reason)
            return FailReason.INSTANCE_LOST, INSTANCE_LOST
        if self.replica.departed.intersection(inst.node_to_runner):
            return FailReason.INSTANCE_LOST, INSTANCE_LOST
        for rid in inst.runner_to_shard:  # every rank must still serve: they run one loop
            status = state.runners.get(rid)
            if status is None:
                return runner_lost, RUNNER_LOST.format(detail="no status")
            if status.kind == RunnerKind.FAILED:
                return runner_lost, RUNNER_LOST.format(detail=status.error_message or "failed")
            if status.kind not in SERVING_KINDS or (rid == runner_id and status.endpoint != endpoint):
                return runner_lost, RUNNER_LOST.format(detail=f"it restarted and is now {status.kind}")
        return None
