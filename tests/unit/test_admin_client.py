"""The admin client against a supervisor that drops a request: the node's control socket closed
with the request read but unanswered, as when the node exec's in place for a restart (real
ZeroMQ sockets over ipc; the supervisor's side is a ROUTER in a thread, as the node's is)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import zmq

from skulk.scripts.admin_client import request
from skulk.wire import endpoints
from skulk.wire.control import AdminCommand, AdminReply, AdminVerb
from skulk.wire.sockets import make_socket, recv_routed, send_routed

WAIT_FOR_AN_HOUR = AdminCommand(verb=AdminVerb.WAIT, timeout_s=3600.0)


def supervisor_that_restarts(endpoint: str, answered: list[AdminCommand]) -> None:
    """Read one request and close without answering (the old incarnation), then bind again and
    answer the next (the new one)."""
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        old = make_socket(ctx, zmq.ROUTER, bind=endpoint)
        assert old.poll(30_000, zmq.POLLIN), "the client's request never came"
        old.recv_multipart()
        old.close(0)
        new = make_socket(ctx, zmq.ROUTER, bind=endpoint)
        assert new.poll(30_000, zmq.POLLIN), "the client never asked again"
        envelope, asked = recv_routed(new)
        assert isinstance(asked, AdminCommand)
        answered.append(asked)
        send_routed(new, envelope, AdminReply(ok=True, message="back", root_pid=42))
        new.close(1000)
    finally:
        ctx.term()


def test_a_request_lost_with_the_link_is_asked_again_at_once_not_after_its_wait(tmp_path: Path) -> None:
    endpoint = endpoints.supervisor_control(endpoints.run_dir(tmp_path))
    endpoints.run_dir(tmp_path).mkdir(parents=True, exist_ok=True)
    answered: list[AdminCommand] = []
    server = threading.Thread(target=supervisor_that_restarts, args=(endpoint, answered), daemon=True)
    server.start()
    got: list[AdminReply] = []
    client = threading.Thread(target=lambda: got.append(request(tmp_path, WAIT_FOR_AN_HOUR, timeout_s=1.0)),
                              daemon=True)
    client.start()
    client.join(60)  # the command's own wait is an hour: only a re-sent request answers within this
    server.join(5)
    assert got and got[0].ok and got[0].message == "back", got
    assert answered == [WAIT_FOR_AN_HOUR]
