"""Socket factories and framed send/receive. Every socket in Skulk is made here.

Policy: `linger=0` (nothing blocks exit), explicit high-water marks, `ROUTER_MANDATORY` on
routed replies (a vanished peer is an error, not a silent drop), a receive size cap on
sockets that face other processes. One socket belongs to one thread.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, cast

import zmq
from zmq.utils.monitor import recv_monitor_message

from skulk.wire import codec, curve
from skulk.wire.errors import MalformedFrame, TopicMismatch, WireError
from skulk.wire.message import Message
from skulk.wire.refusals import Refusals, peer_of
from skulk.wire.topics import Topic

DEFAULT_HWM = 1000

log = logging.getLogger("skulk.wire")


def make_socket(
    ctx: zmq.Context[Any],
    kind: int,
    *,
    hwm: int = DEFAULT_HWM,
    max_msg_bytes: int = codec.MAX_FRAME_BYTES,
    bind: str | None = None,
    connect: str | None = None,
    subscribe: tuple[bytes, ...] = (),
    redials: bool = False,
) -> zmq.Socket[Any]:
    """A socket with the house options (`redials`: the caller re-makes a connected link whose
    CurveZMQ handshake fails, `curve.connect`)."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)  # callers that must flush one last message close with linger
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, hwm)
    sock.setsockopt(zmq.MAXMSGSIZE, max_msg_bytes)
    if kind == zmq.ROUTER:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    if kind == zmq.SUB:
        for prefix in subscribe:
            sock.setsockopt(zmq.SUBSCRIBE, prefix)
    try:
        if bind:
            if kind == zmq.ROUTER and bind.startswith("tcp://"):
                curve.secure_server(sock)  # with a cluster key: CurveZMQ server + ZAP (wire/curve.py)
            sock.bind(bind)
        if connect:
            curve.connect(sock, connect, redials=redials)
    except zmq.ZMQError:
        sock.close(0)
        raise
    return sock


def send(sock: zmq.Socket[Any], msg: Message, *, flags: int = 0) -> None:
    sock.send(codec.encode(msg), flags)


def recv(sock: zmq.Socket[Any], *, flags: int = 0) -> Message:
    """One message from a single-frame socket (PULL, REQ, DEALER to a ROUTER peer)."""
    frames = sock.recv_multipart(flags)
    if len(frames) != 1:
        raise MalformedFrame(f"expected 1 frame, got {len(frames)}")
    return codec.decode(frames[0])


def published_frames(topic: Topic, msg: Message, suffix: str = "") -> list[bytes]:
    """`[topic, payload]` of a message on a PUB/SUB topic that declares its type."""
    if not topic.allows(msg):
        raise TopicMismatch(f"{msg.TYPE} is not declared on topic {topic.prefix!r}")
    return [topic.prefix + suffix.encode(), codec.encode(msg)]


def _send_or_drop(sock: zmq.Socket[Any], frames: list[bytes]) -> None:
    try:
        sock.send_multipart(frames, zmq.NOBLOCK)
    except zmq.Again:
        pass


def publish(sock: zmq.Socket[Any], topic: Topic, msg: Message, suffix: str = "") -> None:
    """PUB `[topic, payload]`, never blocking: PUB drops at its HWM by design."""
    _send_or_drop(sock, published_frames(topic, msg, suffix))


HELD_MAX = 1000
"""Messages a bus publisher keeps while the bus has not yet subscribed (the newest kept)."""


class BusPublisher:
    """A process's publisher into its node's bus: an XPUB connected to the bus's XSUB.

    ZeroMQ connects in the background, and a publisher drops whatever it sends before the bus's
    subscription has reached it: a role's first events were lost so (a runner's `load_model`
    flight entry, the supervisor's events of a crash loop run right after its start). An XPUB
    sees that subscription arrive; until it has, messages are held (at most `HELD_MAX`, in
    order) and go out at the next send or when the owner's loop finds this socket readable
    (`on_readable`). Subscriptions are read as they come and dropped (an XPUB would otherwise
    keep them all). Never blocks; once joined, it drops at its high-water mark as PUB does."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str, hwm: int = DEFAULT_HWM) -> None:
        self.sock = make_socket(ctx, zmq.XPUB, hwm=hwm, connect=endpoint)
        self.joined = False
        self._held: deque[list[bytes]] = deque(maxlen=HELD_MAX)

    def publish(self, topic: Topic, msg: Message, suffix: str = "") -> None:
        """`[topic, payload]`, as `publish` does, held while the bus has not subscribed."""
        frames = published_frames(topic, msg, suffix)
        self.on_readable()
        if self.joined:
            _send_or_drop(self.sock, frames)
        else:
            self._held.append(frames)

    def on_readable(self) -> None:
        """Read the subscriptions that came; once the first has, send what was held."""
        while cast(int, self.sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
            try:
                self.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            self.joined = True
        while self.joined and self._held:
            _send_or_drop(self.sock, self._held.popleft())

    def close(self, linger: int = 0) -> None:
        self.on_readable()
        self.sock.close(linger=linger)


def recv_published(sock: zmq.Socket[Any], *, flags: int = 0) -> tuple[bytes, Message]:
    frames = sock.recv_multipart(flags)
    if len(frames) != 2:
        raise MalformedFrame(f"expected [topic, payload], got {len(frames)} frames")
    return frames[0], codec.decode(frames[1])


class RoutedDecodeError(MalformedFrame):
    """A bad payload from a known sender: carries the envelope so the sender gets an answer."""

    def __init__(self, envelope: list[bytes], cause: Exception, payload: bytes = b"") -> None:
        super().__init__(str(cause))
        self.envelope = envelope
        self.cause = cause
        self.payload = payload  # the undecodable frame, for a receiver that can say more about it


def recv_routed(sock: zmq.Socket[Any], *, flags: int = 0) -> tuple[list[bytes], Message]:
    """From a ROUTER: the envelope (identity, and the empty delimiter of a REQ peer) and the message.

    The envelope is returned even when the payload is bad, via `RoutedDecodeError`, so the
    receiver can answer the sender with an error instead of leaving it waiting.
    """
    frames = sock.recv_multipart(flags)
    if len(frames) < 2:
        raise MalformedFrame("routed frame without an envelope")
    envelope, payload = frames[:-1], frames[-1]
    try:
        return envelope, codec.decode(payload)
    except Exception as exc:
        raise RoutedDecodeError(envelope, exc, payload) from exc


def send_routed(sock: zmq.Socket[Any], envelope: list[bytes], msg: Message) -> bool:
    """Reply through a ROUTER; False when the peer is gone (ROUTER_MANDATORY) or full."""
    try:
        sock.send_multipart([*envelope, codec.encode(msg)], zmq.NOBLOCK)
        return True
    except zmq.ZMQError:
        return False


def drain(sock: zmq.Socket[Any], receive: Callable[..., Any] = recv, *, limit: int = 1000,
          on_error: Callable[[WireError], None] | None = None) -> Iterator[Any]:
    """Everything readable on `sock` now, without blocking, at most `limit` items (so one busy
    socket cannot starve a loop). A frame that does not decode goes to `on_error` (default:
    logged once per sender, then counted) and is skipped: the receiving loop survives bad input."""
    for _ in range(limit):
        try:
            item = receive(sock, flags=zmq.NOBLOCK)
        except zmq.Again:
            return
        except WireError as exc:
            if on_error is not None:
                on_error(exc)
            else:
                DROPPED.refuse(_sender(sock, exc), exc, time.monotonic())
            continue
        yield item


DROPPED = Refusals("wire: bad frames", log)
"""`drain`'s default: a bad frame is logged once per sender, then counted (wire/refusals.py)."""


def _sender(sock: zmq.Socket[Any], exc: WireError) -> str:
    """Who sent a bad frame: the routing id on a ROUTER, else the socket's endpoint."""
    if isinstance(exc, RoutedDecodeError):
        return peer_of(exc.envelope)
    try:
        return cast(bytes, sock.getsockopt(zmq.LAST_ENDPOINT)).decode(errors="replace")  # a bytes option
    except zmq.ZMQError:
        return ""


def link_dropped(monitor: zmq.Socket[Any]) -> bool:
    """Drain a connecting socket's monitor (`get_monitor_socket`); True when it reported its link
    dropping: a request sent on it and not yet answered is lost with the link (REQ and DEALER
    never send it again), so the caller asks again or fails the request at once."""
    dropped = False
    while True:
        try:
            event = recv_monitor_message(monitor, flags=zmq.NOBLOCK)
        except zmq.Again:
            return dropped
        dropped = dropped or event["event"] == zmq.EVENT_DISCONNECTED
