"""The only zmq code between the API's request threads and the runners: generation streams,
embeddings and cancels.

Sockets are thread-local (gthread: one socket, one thread). A request's replies are read in one
poll loop (`_replies`) for streams and embeddings alike: it polls the runner's DEALER in short
slices and checks the state replica between them, so a runner that died, or an instance that
was deleted, ends the request at once instead of waiting for a silence timeout; a dropped TCP
link (the runner's process, or its whole node, is gone) ends it sooner still. Why it ended is
`generate/stream_end.py`'s verdict.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import zmq

from skulk.cluster.replica import StateReplica
from skulk.cluster.state import TaskParams
from skulk.services.api.generate.stream_end import maybe_symptom, why_lost
from skulk.services.api.generate.timing import KeepAlive, StreamTiming
from skulk.wire.commands import RUNNER_LOST, STREAM_STALLED
from skulk.wire.errors import WireError
from skulk.wire.inference import (
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
from skulk.wire.sockets import link_dropped, make_socket, recv, send

SLICE_S = 0.1
FIRST_TOKEN_S = 600.0
EXPLAIN_S = 0.3
LINK_EXPLAIN_S = 0.15
"""After a dropped link, a short wait for the state's cause (a local runner's exit code reaches
the replica in ~50 ms; a killed node's takes the gossip grace, too long to wait for)."""
LINK_LOST = "connection to the runner closed"


def _own_reply(sock: zmq.Socket[Any], request_id: str) -> Message | None:
    """The next reply on a DEALER if it is this request's; None for a bad frame or an earlier
    request's leftover (a thread's DEALER serves its requests one after another)."""
    try:
        msg = recv(sock, flags=zmq.NOBLOCK)
    except (zmq.Again, WireError):
        return None
    return msg if getattr(msg, "request_id", None) == request_id else None


class RunnerLink:
    def __init__(self, replica: StateReplica, timing: StreamTiming, ctx: zmq.Context[Any] | None = None) -> None:
        self.replica = replica
        self.timing = timing
        self._local = threading.local()
        self.ctx: zmq.Context[Any] = ctx or zmq.Context.instance()

    def _dealer(self, endpoint: str) -> tuple[zmq.Socket[Any], zmq.Socket[Any]]:
        """This thread's DEALER to a runner and the monitor that reports its TCP link dropping."""
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

    def _replies(self, endpoint: str, msg: Message, request_id: str, instance_id: str,
                 runner_id: str) -> Iterator[Message | None]:
        """Send `msg` to the runner, then yield this request's replies as they come and None once
        every slice (`SLICE_S`), busy or not: the caller's moment to check its own deadlines.
        A `Failed` ends the replies: the runner's own (explained by the state when it may be a
        symptom), the link dropping, or the state saying the runner can no longer finish it."""
        sock, monitor = self._dealer(endpoint)
        link_dropped(monitor)  # an earlier incarnation's drop says nothing about this request
        send(sock, msg)
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        next_check = time.monotonic() + SLICE_S
        while True:
            ready = dict(poller.poll(int(SLICE_S * 1000)))
            if sock in ready:
                if (reply := _own_reply(sock, request_id)) is not None:
                    if isinstance(reply, Failed) and maybe_symptom(reply):
                        reply = self._explain(reply, instance_id, runner_id, endpoint)
                    yield reply
                    if isinstance(reply, Failed):
                        return
            elif monitor in ready and link_dropped(monitor):  # its output is drained first
                self._forget(endpoint)
                yield self._explain(Failed(request_id=request_id, error=RUNNER_LOST.format(detail=LINK_LOST),
                                           reason=FailReason.RUNNER_FAILED),
                                    instance_id, runner_id, endpoint, wait_s=LINK_EXPLAIN_S)
                return
            now = time.monotonic()
            if now < next_check:
                continue
            next_check = now + SLICE_S  # the state is consulted every slice, busy or not
            if lost := why_lost(self.replica.get(timeout=0), self.replica.departed, instance_id, runner_id, endpoint):
                self._forget(endpoint)
                yield Failed(request_id=request_id, reason=lost[0], error=lost[1])
                return
            yield None

    def stream(self, endpoint: str, request_id: str, task_id: str, instance_id: str,
               runner_id: str, params: TaskParams, context_limit: int = 0,
               default_max_tokens: bool = False, trace: bool = False) -> Iterator[Message | KeepAlive]:
        """Started / Progress / TokenChunk ... then exactly one Done or Failed (or KeepAlive)."""
        now = time.monotonic()
        last_msg = last_out = now
        first_by = now + FIRST_TOKEN_S
        got_token = False
        for msg in self._replies(endpoint, Generate(request_id=request_id, task_id=task_id, params=params,
                                                    context_limit=context_limit,
                                                    default_max_tokens=default_max_tokens, trace=trace),
                                 request_id, instance_id, runner_id):
            now = time.monotonic()
            if msg is not None:
                last_msg = now
                if not (isinstance(msg, Progress) and msg.phase == ProgressPhase.QUEUED):
                    last_out = now  # a queued request's keep-alive: the client sees nothing of it
                got_token = got_token or isinstance(msg, TokenChunk)
                yield msg
                if isinstance(msg, (Done, Failed)):
                    return
            elif got_token and now - last_msg > self.timing.stall_s:
                self.cancel(endpoint, request_id)  # nobody will read the rest
                yield Failed(request_id=request_id, reason=FailReason.STALLED,
                             error=STREAM_STALLED.format(seconds=self.timing.stall_s))
                return
            elif not got_token and now > first_by:
                self.cancel(endpoint, request_id)
                yield Failed(request_id=request_id, reason=FailReason.NO_OUTPUT,
                             error=f"No output within {FIRST_TOKEN_S:.0f}s")
                return
            elif now - last_out >= self.timing.keepalive_s:
                last_out = now
                yield KeepAlive()

    def embed(self, endpoint: str, request_id: str, task_id: str, instance_id: str, runner_id: str,
              inputs: tuple[str, ...], dimensions: int = 0, idle_s: float = FIRST_TOKEN_S) -> Embeddings | Failed:
        """Send one `Embed` and gather its parts into one `Embeddings` (all inputs, in order), or
        the `Failed`: the runner's, its loss, or `idle_s` without a part (it may be queued behind
        other requests)."""
        parts: dict[int, Embeddings] = {}
        last = time.monotonic()
        for msg in self._replies(endpoint, Embed(request_id=request_id, task_id=task_id, inputs=inputs,
                                                 dimensions=dimensions),
                                 request_id, instance_id, runner_id):
            now = time.monotonic()
            if isinstance(msg, Failed):
                return msg
            if msg is not None:
                last = now
            if isinstance(msg, Embeddings):
                parts[msg.start] = msg
                if sum(len(p.vectors) for p in parts.values()) >= len(inputs):
                    ordered = [parts[k] for k in sorted(parts)]
                    return Embeddings(request_id=request_id, start=0,
                                      vectors=tuple(v for p in ordered for v in p.vectors),
                                      prompt_tokens=sum(p.prompt_tokens for p in ordered))
            elif msg is None and now - last > idle_s:
                self.cancel(endpoint, request_id)
                return Failed(request_id=request_id, reason=FailReason.NO_OUTPUT,
                              error=f"No embeddings from the runner within {idle_s:.0f}s")
        raise AssertionError("the runner's replies end with a Failed")  # _replies never ends otherwise

    def _explain(self, failed: Failed, instance_id: str, runner_id: str, endpoint: str,
                 wait_s: float = EXPLAIN_S) -> Failed:
        """A runner's own error is often a symptom (a peer rank was stopped because the instance
        was deleted): give the state up to `wait_s` to catch up and prefer its cause."""
        deadline = time.monotonic() + wait_s
        while True:
            state = self.replica.get(timeout=0)
            if lost := why_lost(state, self.replica.departed, instance_id, runner_id, endpoint):
                return Failed(request_id=failed.request_id, reason=lost[0], error=lost[1],
                              retryable=failed.retryable)
            left = deadline - time.monotonic()
            if left <= 0 or state is None:
                return failed
            self.replica.wait_change(state.last_event_applied_idx, left)
