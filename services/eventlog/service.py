"""Subscribes to every `evt.` topic on the bus and appends it to the segment file."""

from __future__ import annotations

from typing import Any

import zmq

from skulk.services.base import ServiceLoop
from skulk.services.eventlog.segment import Segment
from skulk.wire import endpoints
from skulk.wire.sockets import make_socket

MAX_BYTES = 64 * 1024 * 1024
BATCH = 1000


def setup(loop: ServiceLoop, _argv: list[str]) -> None:
    args = loop.rt.args
    segment = Segment(args.home / "eventlog" / "events.log", MAX_BYTES)
    sub = make_socket(loop.ctx, zmq.SUB, hwm=10000, connect=endpoints.bus_out(args.run_dir),
                      subscribe=(b"evt.",))

    def on_event(sock: zmq.Socket[Any]) -> None:
        for _ in range(BATCH):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frames) == 2:
                segment.append(frames[0], frames[1])
        loop.status_detail = f"{segment.appended} events" + (" (counting-only)" if segment.degraded else "")

    loop.add_reader(sub, on_event)
