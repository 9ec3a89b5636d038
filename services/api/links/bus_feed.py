"""A daemon thread following this node's bus for a view of the API worker (the runner view:
runners' reports and flight entries, gossip's membership, the node's restart), with bounds on
what the bus may bring: the bus is node-local, but anything of the node's user can publish on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq

from skulk.wire import codec, endpoints
from skulk.wire.errors import MalformedFrame
from skulk.wire.message import Message
from skulk.wire.sockets import drain, make_socket
from skulk.wire.topics import EVT_FLIGHT, EVT_RUNNER

VIEW_HWM = 10_000
"""Bus messages queued for this view at most: reports every 2 s and at most a few flight entries
a second per runner need far fewer; it was 100,000, and a local process publishing 8 MiB frames
under the view's topics queued hundreds of MiB in the API worker."""
VIEW_MAX_FRAME = 1024 * 1024
"""A membership of a large cluster fits; a larger frame makes zmq drop the connection (and
reconnect) instead of queueing it."""
RECORD_MAX_BYTES = 16 * 1024
"""A runner's report is a few hundred bytes (its error message can be longer); a larger one is
not kept."""
ENTRY_MAX_BYTES = 2 * 1024
"""A flight entry is ~200 bytes; the ring holds `RING` of them per runner, so at most
`MAX_RUNNERS * RING * ENTRY_MAX_BYTES` (64 MiB) whatever the bus brings."""


def follow(run_dir: Path, topics: tuple[bytes, ...], on_message: Callable[[Message, float], None],
           every: Callable[[float], None], every_s: float, name: str) -> threading.Thread:
    """Start the thread: each message under `topics` to `on_message(msg, wall clock)`, and
    `every(wall clock)` every `every_s` (a view forgets what went quiet)."""
    thread = threading.Thread(target=_run, args=(run_dir, topics, on_message, every, every_s), name=name,
                              daemon=True)
    thread.start()
    return thread


def _run(run_dir: Path, topics: tuple[bytes, ...], on_message: Callable[[Message, float], None],
         every: Callable[[float], None], every_s: float) -> None:
    ctx: zmq.Context[Any] = zmq.Context.instance()
    sub = make_socket(ctx, zmq.SUB, hwm=VIEW_HWM, max_msg_bytes=VIEW_MAX_FRAME, connect=endpoints.bus_out(run_dir),
                      subscribe=topics)
    due = time.monotonic() + every_s
    while True:
        try:
            ready = sub.poll(max(1, int((due - time.monotonic()) * 1000)), zmq.POLLIN)
        except zmq.ContextTerminated:  # the process is stopping
            return
        if ready:
            for _topic, msg in drain(sub, recv_bounded):
                on_message(msg, time.time())
        if time.monotonic() >= due:
            due = time.monotonic() + every_s
            every(time.time())


def recv_bounded(sock: zmq.Socket[Any], *, flags: int = 0) -> tuple[bytes, Message]:
    """`recv_published`, refusing a runner report over `RECORD_MAX_BYTES` or a flight entry over
    `ENTRY_MAX_BYTES` before decoding it (`drain` logs it once per sender, then counts)."""
    frames = sock.recv_multipart(flags)
    if len(frames) == 2:
        limit = RECORD_MAX_BYTES if frames[0].startswith(EVT_RUNNER.prefix) \
            else ENTRY_MAX_BYTES if frames[0].startswith(EVT_FLIGHT.prefix) else None
        if limit is not None and len(frames[1]) > limit:
            raise MalformedFrame(f"a runner record of {len(frames[1])} bytes (at most {limit})")
    if len(frames) != 2:
        raise MalformedFrame(f"expected [topic, payload], got {len(frames)} frames")
    return frames[0], codec.decode(frames[1])
