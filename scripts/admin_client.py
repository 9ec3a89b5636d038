"""Talk to a node's supervisor control socket (Lazy Pirate: poll, retry on a fresh socket).

A request the supervisor had received but not answered is gone when its link drops (the node
exec'ing in place for a restart, or dying): REQ never sends it again. Each try therefore watches
its link as well as the reply, and a drop starts the next try at once instead of waiting out the
try's deadline, which for a `wait` is the command's own wait time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import zmq

from skulk.wire import endpoints
from skulk.wire.control import AdminCommand, AdminReply
from skulk.wire.errors import WireError
from skulk.wire.sockets import link_dropped, make_socket, recv, send


class NodeUnreachable(RuntimeError):
    """No answer from the node's supervisor within the deadline."""


def request(home: Path, cmd: AdminCommand, *, timeout_s: float = 5.0, retries: int = 3) -> AdminReply:
    """Send one command; each try waits `timeout_s` (plus the command's own wait time)."""
    ctx: zmq.Context[Any] = zmq.Context.instance()
    endpoint = endpoints.supervisor_control(endpoints.run_dir(home.expanduser().resolve()))
    per_try_ms = int((timeout_s + max(cmd.timeout_s, 0.0)) * 1000)
    for _ in range(max(1, retries)):
        sock = make_socket(ctx, zmq.REQ, connect=endpoint)
        link: zmq.Socket[Any] | None = None
        try:
            link = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            send(sock, cmd)
            if _answered(sock, link, per_try_ms):
                reply = recv(sock)
                if not isinstance(reply, AdminReply):
                    raise NodeUnreachable(f"unexpected reply {reply.TYPE}")
                return reply
        except WireError as exc:
            raise NodeUnreachable(f"bad reply from node: {exc}") from None
        finally:
            try:
                if link is not None:
                    sock.disable_monitor()
                    link.close(0)
            finally:
                sock.close(0)
    raise NodeUnreachable(f"no answer from the node at {home} ({endpoint})")


def _answered(sock: zmq.Socket[Any], link: zmq.Socket[Any], timeout_ms: int) -> bool:
    """Whether the reply came within `timeout_ms`; False at once when the link drops first (the
    request is lost with it). A reply that came just before the drop is still read: ZeroMQ
    queues it before it tells of the drop, and a verb answered then (`stop`, `restart`) must not
    be sent twice."""
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    poller.register(link, zmq.POLLIN)
    ready = dict(poller.poll(timeout_ms))
    return sock in ready or (link in ready and link_dropped(link) and bool(sock.poll(0, zmq.POLLIN)))


def format_status(reply: AdminReply) -> str:
    rows = [("ID", "SUPERVISOR", "KIND", "PID", "STATE", "RESTARTS", "UPTIME")]
    for c in reply.children:
        rows.append((c.id, c.supervisor, c.kind, str(c.pid or "-"), c.state, str(c.restarts),
                     f"{c.uptime_s:.1f}s" if c.uptime_s is not None else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"node {reply.node_name}, root pid {reply.root_pid}" if reply.node_name else f"root pid {reply.root_pid}"]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)
