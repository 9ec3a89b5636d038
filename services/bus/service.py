"""The bus proxy inside the service loop (not `zmq.proxy`, which would block the heartbeat).

Publishers' frames go XSUB -> XPUB and, copied, to the capture PUB; subscriptions go back
XPUB -> XSUB; the bus itself subscribes to every `evt.` topic so that the capture (the tap)
sees everything, whatever the other subscribers want. Every send is non-blocking: PUB/SUB
drops at the high-water mark, so a slow or frozen subscriber (a stopped `skulk tap`) never
slows the node. Each wake-up forwards at most
`BATCH` frames so a flood cannot starve the heartbeat.
"""

from __future__ import annotations

from typing import Any

import zmq

from skulk.services.base import ServiceLoop
from skulk.wire import endpoints
from skulk.wire.sockets import make_socket

BATCH = 1000
BUS_HWM = 10000
CAPTURE_HWM = 1000


def _forward(src: zmq.Socket[Any], *dests: zmq.Socket[Any]) -> None:
    for _ in range(BATCH):
        try:
            frames = src.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        for dest in dests:
            try:
                dest.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:
                pass


def setup(loop: ServiceLoop, _argv: list[str]) -> None:
    run = loop.rt.args.run_dir
    xsub = make_socket(loop.ctx, zmq.XSUB, hwm=BUS_HWM, bind=endpoints.bus_in(run))
    xpub = make_socket(loop.ctx, zmq.XPUB, hwm=BUS_HWM, bind=endpoints.bus_out(run))
    capture = make_socket(loop.ctx, zmq.PUB, hwm=CAPTURE_HWM, bind=endpoints.bus_capture(run))
    xsub.send(b"\x01evt.")  # every event reaches the capture (the tap), subscribed or not
    loop.add_reader(xsub, lambda s: _forward(s, xpub, capture))
    loop.add_reader(xpub, lambda s: _forward(s, xsub))
    loop.status_detail = "proxy up"
