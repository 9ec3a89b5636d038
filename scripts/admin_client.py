"""Talk to a node's supervisor control socket (Lazy Pirate: poll, retry on a fresh socket)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import zmq

from skulk.wire import endpoints
from skulk.wire.control import AdminCommand, AdminReply
from skulk.wire.errors import WireError
from skulk.wire.sockets import make_socket, recv, send


class NodeUnreachable(RuntimeError):
    """No answer from the node's supervisor within the deadline."""


def request(home: Path, cmd: AdminCommand, *, timeout_s: float = 5.0, retries: int = 3) -> AdminReply:
    """Send one command; each try waits `timeout_s` (plus the command's own wait time)."""
    ctx: zmq.Context[Any] = zmq.Context.instance()
    endpoint = endpoints.supervisor_control(endpoints.run_dir(home.expanduser().resolve()))
    per_try_ms = int((timeout_s + max(cmd.timeout_s, 0.0)) * 1000)
    for _ in range(max(1, retries)):
        sock = make_socket(ctx, zmq.REQ, connect=endpoint)
        try:
            send(sock, cmd)
            if sock.poll(per_try_ms, zmq.POLLIN):
                reply = recv(sock)
                if not isinstance(reply, AdminReply):
                    raise NodeUnreachable(f"unexpected reply {reply.TYPE}")
                return reply
        except WireError as exc:
            raise NodeUnreachable(f"bad reply from node: {exc}") from None
        finally:
            sock.close(0)
    raise NodeUnreachable(f"no answer from the node at {home} ({endpoint})")


def format_status(reply: AdminReply) -> str:
    rows = [("ID", "SUPERVISOR", "KIND", "PID", "STATE", "RESTARTS", "UPTIME")]
    for c in reply.children:
        rows.append((c.id, c.supervisor, c.kind, str(c.pid or "-"), c.state, str(c.restarts),
                     f"{c.uptime_s:.1f}s" if c.uptime_s is not None else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"node {reply.node_name}, root pid {reply.root_pid}" if reply.node_name else f"root pid {reply.root_pid}"]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)
