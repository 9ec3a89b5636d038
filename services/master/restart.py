"""The master's uses of its node's supervisor: `POST /admin/restart` of this node, and telling
it that the restart's drain is over (`drained`, `drain.py`). A second restart asked while the
first is under way is upstream's 409 (this process is replaced by the restart, so the flag
lives exactly as long as it must)."""

from __future__ import annotations

import logging
from typing import Any

import zmq

from skulk.wire.commands import RESTART_PENDING, CommandAccepted, CommandRejected, RejectReason, Reply
from skulk.wire.control import AdminCommand
from skulk.wire.sockets import send

log = logging.getLogger("skulk.master")


class NodeRestart:
    def __init__(self, sup: zmq.Socket[Any]) -> None:
        self.sup = sup
        self.asked = False

    def restart_node(self, command_id: str) -> Reply:
        if self.asked:
            return CommandRejected(command_id=command_id, status=409, message=RESTART_PENDING,
                                   reason=RejectReason.RESTART_PENDING)
        log.warning("restarting this node in place (asked through the API)")
        send(self.sup, AdminCommand(verb="restart"), flags=zmq.NOBLOCK)
        self.asked = True
        return CommandAccepted(command_id=command_id, message="restarting")

    def drained(self) -> bool:
        """Tell the supervisor the drain is over; False when the message could not go yet."""
        try:
            send(self.sup, AdminCommand(verb="drained"), flags=zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def drain(self, sock: zmq.Socket[Any]) -> None:
        """The supervisor's replies: nothing to do with them."""
        while sock.poll(0, zmq.POLLIN):
            sock.recv_multipart(zmq.NOBLOCK)
