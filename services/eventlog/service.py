"""Records the node's state changes (`retention.worth_recording`) and the API's chunk and
request records (PULLed, `wire/api_events.py`) into the event log files (`segment.py`);
counting-only when the disk is full, and back to writing when it is not. State events missed
on the bus (before this role connected, while it was down) are asked of the node's master and
recorded in order (`catchup.py`)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import zmq

from skulk.cluster.state import IndexedEvent, NodeGatheredInfo, StateHead
from skulk.node import metrics
from skulk.node.eventlog_files import iter_records, log_files
from skulk.services.base import ServiceLoop
from skulk.services.eventlog.catchup import CatchUp, Step
from skulk.services.eventlog.retention import Retention, is_refresh, worth_recording
from skulk.services.eventlog.segment import Segment
from skulk.wire import endpoints
from skulk.wire.api_events import API_TOPICS, CHUNK_TOPIC, CHUNKS_PER_MESSAGE
from skulk.wire.cluster import EventBatch, ReplayRequest
from skulk.wire.codec import decode, encode
from skulk.wire.errors import WireError
from skulk.wire.sockets import drain, make_socket, send
from skulk.wire.topics import EVT_STATE, EVT_SUPERVISOR

log = logging.getLogger("skulk.eventlog")

BATCH = 1000
RESUME_CHECK_S = 10.0
MODE_SHOW_S = 1.0
CATCH_UP_CHECK_S = 0.5
STATE_EVENTS = EVT_STATE.prefix + b"event."
Frame = tuple[bytes, bytes]  # (topic, payload), as recorded


def _node_of(payload: bytes) -> str:
    """The node a refreshed node-info event is about ("" when unreadable: recorded once)."""
    try:
        msg = decode(payload)
    except WireError:
        return ""
    if isinstance(msg, IndexedEvent) and isinstance(msg.event, NodeGatheredInfo):
        return str(msg.event.info.node_id)
    return ""


SCAN_FILES = 2
"""Files read at start for the last recorded state event (the active one and the newest archive):
a start never reads every archive."""


def recorded_position(directory: Path) -> tuple[str, int]:
    """(session, index) of the last state event in the newest file holding one: where this
    role left off before it was restarted (("", -1): nothing recorded)."""
    for path in list(reversed(log_files(directory)))[:SCAN_FILES]:
        last = None
        for _when, topic, payload in iter_records(path):
            if topic.startswith(STATE_EVENTS):
                last = payload
        if last is not None:
            try:
                ev = decode(last)
            except WireError:
                continue
            if isinstance(ev, IndexedEvent):
                return ev.session, ev.idx
    return "", -1


def api_records_shape(frames: list[bytes]) -> bool:
    """A message the API may send (`wire/api_events.py`): a task record alone, or 1 to
    `CHUNKS_PER_MESSAGE` chunk records."""
    if len(frames) < 2:
        return False
    if frames[0] == CHUNK_TOPIC:
        return len(frames) - 1 <= CHUNKS_PER_MESSAGE
    return frames[0] in API_TOPICS and len(frames) == 2


def setup(loop: ServiceLoop, argv: list[str]) -> None:
    keep = Retention.from_argv(argv)
    args = loop.rt.args
    catch_up: CatchUp[Frame] = CatchUp(*recorded_position(args.home / "eventlog"))
    segment = Segment(args.home / "eventlog", keep)
    seen: set[str] = set()
    sub = make_socket(loop.ctx, zmq.SUB, hwm=10000, connect=endpoints.bus_out(args.run_dir),
                      subscribe=(EVT_STATE.prefix, EVT_SUPERVISOR.prefix))
    master = make_socket(loop.ctx, zmq.DEALER, connect=endpoints.master_local(args.run_dir))

    def record(topic: bytes, payload: bytes) -> None:
        if worth_recording(topic, seen, _node_of(payload) if is_refresh(topic) else ""):
            segment.append(topic, payload)

    def carry_out(step: Step[Frame]) -> None:
        for topic, payload in step.record:
            record(topic, payload)
        if step.skipped:
            log.info("%d state event(s) of session %s were not heard on this node's bus and are no longer "
                     "held by its master: not recorded", step.skipped, catch_up.session[:12])
        if step.ask is not None:
            try:
                send(master, ReplayRequest(node_id="eventlog", session=step.ask.session, since=step.ask.since),
                     flags=zmq.NOBLOCK)
            except zmq.Again:
                pass  # no master to ask (restarting): the ask times out and the log goes on

    def on_event(sock: zmq.Socket[Any]) -> None:
        now = time.monotonic()
        for _ in range(BATCH):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frames) != 2:
                continue
            topic, payload = frames
            if not topic.startswith(EVT_STATE.prefix):
                record(topic, payload)
                continue
            try:
                msg = decode(payload)
            except WireError:
                continue
            if isinstance(msg, IndexedEvent):
                carry_out(catch_up.on_event(msg.session, msg.idx, (topic, payload), now))
            elif isinstance(msg, StateHead):
                carry_out(catch_up.on_head(msg.session, msg.idx, now))
        loop.status_detail = f"{segment.appended} events" + (
            f" (counting-only: {segment.degraded})" if segment.degraded else "")

    def on_master(sock: zmq.Socket[Any]) -> None:
        for msg in drain(sock, limit=10):
            if isinstance(msg, EventBatch):
                frames = [(ev.idx, (EVT_STATE.prefix + ev.event.TYPE.encode(), encode(ev)))
                          for ev in msg.events]
                carry_out(catch_up.on_batch(msg.session, frames, time.monotonic()))

    pull = make_socket(loop.ctx, zmq.PULL, hwm=10000, bind=endpoints.eventlog_in(args.run_dir))

    def on_api_record(sock: zmq.Socket[Any]) -> None:
        for _ in range(BATCH):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            if api_records_shape(frames):  # anything else from a local process is dropped
                for payload in frames[1:]:  # one record, or a thread's held chunk records in order
                    segment.append(frames[0], payload)

    loop.add_reader(sub, on_event)
    loop.add_reader(master, on_master)
    loop.add_reader(pull, on_api_record)
    loop.every(CATCH_UP_CHECK_S, lambda: carry_out(catch_up.due(time.monotonic())))
    loop.every(RESUME_CHECK_S, segment.resume_if_possible)
    # `skulk_eventlog_counting_only` (node/metrics.py): the mode as of the last second
    loop.every(MODE_SHOW_S, lambda: metrics.EVENTLOG_COUNTING.set(int(bool(segment.degraded))), first_in=0.0)
    loop.on_stop(segment.close)
