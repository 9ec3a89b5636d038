"""The master's links to the other members' masters: one DEALER per member, opened when gossip
reports it and closed when it leaves (a closed link stops zmq reconnecting to a dead node).
Sends never block: a peer that cannot take more misses the message, which is resent,
replayed or re-announced by the protocols above.

During a cluster key rotation a link is dialled with the key its server presented then
(`wire/curve.py` probes it); a member that restarts onto another current key, or one whose
master was not listening yet when it was probed, refuses the handshakes of that link for good.
So while the file holds more than one key, a link whose handshake fails is re-made (probing
again), at most once a second (`curve.redial_due`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from skulk.services.base import ServiceLoop
from skulk.wire import codec, curve
from skulk.wire.cluster import Member
from skulk.wire.message import Message
from skulk.wire.sockets import make_socket, send

log = logging.getLogger("skulk.master")

MAX_PEER_FRAME = 64 * 1024 * 1024


class PeerLinks:
    def __init__(self, loop: ServiceLoop, node_id: str, on_readable: Callable[[Any], None]) -> None:
        self.loop, self.node_id, self.on_readable = loop, node_id, on_readable
        self.socks: dict[str, zmq.Socket[Any]] = {}
        self.endpoints: dict[str, str] = {}
        self.monitors: dict[str, zmq.Socket[Any]] = {}  # during a rotation: each link's handshake failures
        self.redial: set[str] = set()  # links to re-make at the next `tick`
        self.redialled: dict[str, float] = {}

    def sync(self, members: Mapping[str, Member]) -> None:
        for node_id, member in members.items():
            if node_id != self.node_id and node_id not in self.socks:
                self._open(node_id, member.master_endpoint)
        for node_id in [n for n in self.socks if n not in members]:
            self._close(node_id)
            self.redialled.pop(node_id, None)

    def _open(self, node_id: str, endpoint: str) -> None:
        sock = make_socket(self.loop.ctx, zmq.DEALER, hwm=10000, max_msg_bytes=MAX_PEER_FRAME, connect=endpoint,
                           redials=True)
        self.socks[node_id], self.endpoints[node_id] = sock, endpoint
        self.loop.add_reader(sock, self.on_readable)
        if curve.rotating():
            monitor = sock.get_monitor_socket(curve.HANDSHAKE_FAILED)
            self.monitors[node_id] = monitor
            self.loop.add_reader(monitor, lambda m: self._on_monitor(node_id, m))

    def _close(self, node_id: str) -> None:
        sock = self.socks.pop(node_id)
        self.endpoints.pop(node_id, None)
        self.redial.discard(node_id)
        self.loop.remove_reader(sock)
        if (monitor := self.monitors.pop(node_id, None)) is not None:
            self.loop.remove_reader(monitor)
            sock.disable_monitor()
            monitor.close(0)
        sock.close(0)

    def _on_monitor(self, node_id: str, monitor: zmq.Socket[Any]) -> None:
        for _ in range(64):
            try:
                recv_monitor_message(monitor, flags=zmq.NOBLOCK)
            except zmq.Again:
                break
            if curve.redial_due(curve.rotating(), self.redialled.get(node_id), time.monotonic()):
                self.redial.add(node_id)  # not here: this very monitor is being read

    def tick(self) -> None:
        """Re-make the links whose handshakes failed (outside the readers' dispatch)."""
        for node_id in [n for n in self.redial if n in self.socks]:
            endpoint = self.endpoints[node_id]
            log.info("master: handshake with %s's master failed during a key rotation; dialling it again",
                     node_id)
            self._close(node_id)
            self.redialled[node_id] = time.monotonic()
            self._open(node_id, endpoint)
        self.redial.clear()

    def get(self, node_id: str) -> zmq.Socket[Any] | None:
        return self.socks.get(node_id)

    def send(self, node_id: str, msg: Message) -> bool:
        """False when `node_id` is no member we link to (a full link drops the message)."""
        sock = self.socks.get(node_id)
        if sock is None:
            return False
        try:
            send(sock, msg, flags=zmq.NOBLOCK)
        except zmq.Again:
            pass
        return True

    def broadcast(self, msg: Message) -> None:
        """To every linked master: encoded once (a batch of events for N peers is not N encodings)."""
        frame = codec.encode(msg)
        for sock in list(self.socks.values()):
            try:
                sock.send(frame, zmq.NOBLOCK)
            except zmq.Again:
                pass
