"""The master's link to its node's supervisor: restart this node in place (`POST
/admin/restart`), and tell it that the restart's drain is over (`drained`). The core decides
when (`own_node.py`); this only sends."""

from __future__ import annotations

from typing import Any

import zmq

from skulk.wire.control import AdminCommand, AdminVerb
from skulk.wire.sockets import send


class SupervisorLink:
    def __init__(self, sup: zmq.Socket[Any]) -> None:
        self.sup = sup

    def tell(self, verb: AdminVerb) -> bool:
        """False when the message could not go yet (the core asks again)."""
        try:
            send(self.sup, AdminCommand(verb=verb), flags=zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def drain(self, sock: zmq.Socket[Any]) -> None:
        """The supervisor's replies: nothing to do with them."""
        while sock.poll(0, zmq.POLLIN):
            sock.recv_multipart(zmq.NOBLOCK)
