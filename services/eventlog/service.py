"""Records the node's state changes (`retention.worth_recording`) and the API's chunk and
request records (PULLed, `wire/api_events.py`) into the event log files (`segment.py`);
counting-only when the disk is full, and back to writing when it is not."""

from __future__ import annotations

import argparse
from typing import Any

import zmq

from skulk.services.base import ServiceLoop
from skulk.services.eventlog.retention import Retention, is_refresh, worth_recording
from skulk.services.eventlog.segment import Segment
from skulk.wire import endpoints, metrics
from skulk.wire.api_events import API_TOPICS
from skulk.wire.codec import decode
from skulk.wire.errors import WireError
from skulk.wire.sockets import make_socket

BATCH = 1000
RESUME_CHECK_S = 10.0
MODE_SHOW_S = 1.0


def _node_of(payload: bytes) -> str:
    """The node a refreshed node-info event is about ("" when unreadable: recorded once)."""
    try:
        return str(decode(payload).event.info.node_id)  # type: ignore[attr-defined]
    except (WireError, AttributeError):
        return ""


def setup(loop: ServiceLoop, argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="skulk.services.eventlog")
    defaults = Retention()
    for field in ("ring_bytes", "ring_keep", "ring_check_every", "archives_max", "archives_bytes",
                  "floor_bytes", "floor_check_every"):
        p.add_argument("--" + field.replace("_", "-"), type=int, default=getattr(defaults, field))
    ns = p.parse_args(argv)
    keep = Retention(**{k: v for k, v in vars(ns).items()})
    args = loop.rt.args
    segment = Segment(args.home / "eventlog", keep)
    seen: set[str] = set()
    sub = make_socket(loop.ctx, zmq.SUB, hwm=10000, connect=endpoints.bus_out(args.run_dir),
                      subscribe=(b"evt.state.event.", b"evt.supervisor."))

    def on_event(sock: zmq.Socket[Any]) -> None:
        for _ in range(BATCH):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frames) != 2:
                continue
            topic, payload = frames
            if worth_recording(topic, seen, _node_of(payload) if is_refresh(topic) else ""):
                segment.append(topic, payload)
        loop.status_detail = f"{segment.appended} events" + (
            f" (counting-only: {segment.degraded})" if segment.degraded else "")

    pull = make_socket(loop.ctx, zmq.PULL, hwm=10000, bind=endpoints.eventlog_in(args.run_dir))

    def on_api_record(sock: zmq.Socket[Any]) -> None:
        for _ in range(BATCH):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frames) == 2 and frames[0] in API_TOPICS:  # anything else from a local process is dropped
                segment.append(frames[0], frames[1])

    loop.add_reader(sub, on_event)
    loop.add_reader(pull, on_api_record)
    loop.every(RESUME_CHECK_S, segment.resume_if_possible)
    # `skulk_eventlog_counting_only` (wire/metrics.py): the mode as of the last second
    loop.every(MODE_SHOW_S, lambda: metrics.EVENTLOG_COUNTING.set(int(bool(segment.degraded))), first_in=0.0)
    loop.on_stop(segment.close)
