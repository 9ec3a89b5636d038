"""The master's links to the other members' masters: one DEALER per member, opened when gossip
reports it and closed when it leaves (a closed link stops zmq reconnecting to a dead node).
Sends never block: a peer that cannot take more misses the message, which is resent,
replayed or re-announced by the protocols above."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import zmq

from skulk.services.base import ServiceLoop
from skulk.wire.cluster import Member
from skulk.wire.message import Message
from skulk.wire.sockets import make_socket, send

MAX_PEER_FRAME = 64 * 1024 * 1024


class PeerLinks:
    def __init__(self, loop: ServiceLoop, node_id: str, on_readable: Callable[[Any], None]) -> None:
        self.loop, self.node_id, self.on_readable = loop, node_id, on_readable
        self.socks: dict[str, zmq.Socket[Any]] = {}

    def sync(self, members: Mapping[str, Member]) -> None:
        for node_id, member in members.items():
            if node_id != self.node_id and node_id not in self.socks:
                self.socks[node_id] = make_socket(self.loop.ctx, zmq.DEALER, hwm=10000, max_msg_bytes=MAX_PEER_FRAME,
                                                  connect=member.master_endpoint)
                self.loop.add_reader(self.socks[node_id], self.on_readable)
        for node_id in [n for n in self.socks if n not in members]:
            sock = self.socks.pop(node_id)
            self.loop.remove_reader(sock)
            sock.close(0)

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
        for node_id in list(self.socks):
            self.send(node_id, msg)
