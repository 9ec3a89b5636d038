"""Holds the node's cluster port. Until the membership protocol exists every frame that
arrives is decoded, logged and rejected: nothing from the network can crash this loop."""

from __future__ import annotations

import argparse
import logging
from typing import Any

import zmq

from skulk.services.base import ServiceLoop
from skulk.wire import endpoints
from skulk.wire.errors import WireError
from skulk.wire.sockets import make_socket, recv_routed

log = logging.getLogger("skulk.gossip")

MAX_PEER_FRAME = 1024 * 1024


def setup(loop: ServiceLoop, argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="skulk.services.gossip")
    p.add_argument("--listen", default="0.0.0.0")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--namespace", default="skulk")
    p.add_argument("--peers", default="")
    ns = p.parse_args(argv)
    router = make_socket(loop.ctx, zmq.ROUTER, max_msg_bytes=MAX_PEER_FRAME,
                         bind=endpoints.tcp(ns.listen, ns.port))

    def on_frame(sock: zmq.Socket[Any]) -> None:
        try:
            _, msg = recv_routed(sock, flags=zmq.NOBLOCK)
            log.warning("gossip: rejected %s (membership protocol not enabled)", msg.TYPE)
        except WireError as exc:
            log.warning("gossip: rejected bad frame from a peer: %s", exc)
        except zmq.Again:
            pass

    loop.add_reader(router, on_frame)
    loop.status_detail = f"namespace {ns.namespace}, port {ns.port}"
