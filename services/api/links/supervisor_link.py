"""This node's process tree as `skulk admin status` shows it, for `GET /metrics`: one short-lived
REQ to the supervisor per scrape (it serves an occasional scrape, never a request path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import zmq

from skulk.wire import endpoints
from skulk.wire.control import AdminCommand, AdminReply, AdminVerb
from skulk.wire.errors import WireError
from skulk.wire.sockets import make_socket, recv, send


def supervisor_status(run_dir: Path, timeout: float = 1.0, ctx: zmq.Context[Any] | None = None) -> AdminReply | None:
    """The supervisor's status reply, or None when it does not answer in time."""
    sock = make_socket(ctx or zmq.Context.instance(), zmq.REQ, connect=endpoints.supervisor_control(run_dir))
    try:
        send(sock, AdminCommand(verb=AdminVerb.STATUS))
        if not sock.poll(int(timeout * 1000), zmq.POLLIN):
            return None
        reply = recv(sock)
        return reply if isinstance(reply, AdminReply) else None
    except WireError:
        return None
    finally:
        sock.close(0)
