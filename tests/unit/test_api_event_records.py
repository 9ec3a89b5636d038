"""The API's event-log records (`services/api/links/event_log.py`) as the eventlog role reads
them: a request's routing, its chunks held and sent several to a message, in order, and its end;
held records go once a chunk comes `CHUNK_HOLD_S` after the oldest, at `CHUNKS_PER_MESSAGE`
records, or when the stream pauses (`flush`)."""

from __future__ import annotations

import zmq

from skulk.services.api.links import event_log
from skulk.services.api.links.event_log import EventRecorder
from skulk.services.eventlog.service import api_records_shape
from skulk.wire import codec, endpoints
from skulk.wire.api_events import (
    CHUNK_TOPIC,
    CHUNKS_PER_MESSAGE,
    TASK_TOPIC,
    ChunkGenerated,
    RequestEnded,
    RequestRouted,
)
from skulk.wire.commands import Routed
from skulk.wire.inference import Done, TokenChunk

ROUTED = Routed(command_id="c1", task_id="t1", instance_id="i1", runner_id="r1", endpoint="ipc://x")


def chunk(seq: int) -> TokenChunk:
    return TokenChunk(request_id="c1", seq=seq, text=f"w{seq}", token=100 + seq, index=seq)


def pull(tmp_path) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.PULL)
    sock.bind(endpoints.eventlog_in(tmp_path))
    return sock


def messages(sock: zmq.Socket) -> list[tuple[bytes, list[object]]]:
    """Every message the recorder has sent so far: (topic, the records it carries)."""
    out = []
    while sock.poll(500):
        topic, *payloads = sock.recv_multipart()
        out.append((topic, [codec.decode(p) for p in payloads]))
    return out


def test_a_requests_chunks_go_together_between_its_routing_and_its_end(tmp_path):
    sock = pull(tmp_path)
    rec = EventRecorder(tmp_path)
    try:
        rec.routed(ROUTED, "m")
        for seq in range(3):
            rec.chunk(ROUTED, "m", chunk(seq))
        rec.ended(ROUTED, "m", Done(request_id="c1", seq=4, finish_reason="length", prompt_tokens=2,
                                    completion_tokens=3, prompt_tps=0.0, generation_tps=0.0, peak_memory_bytes=0), 2)
        got = messages(sock)
    finally:
        sock.close(0)
    assert [(topic, [type(r) for r in records]) for topic, records in got] == [
        (TASK_TOPIC, [RequestRouted]), (CHUNK_TOPIC, [ChunkGenerated] * 3), (TASK_TOPIC, [RequestEnded])]
    assert [(c.seq, c.text, c.token) for c in got[1][1]] == [(0, "w0", 100), (1, "w1", 101), (2, "w2", 102)]


def test_held_chunks_go_after_the_hold_time_or_a_full_message(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(event_log.time, "time", lambda: clock[0])
    sock = pull(tmp_path)
    rec = EventRecorder(tmp_path)
    try:
        rec.chunk(ROUTED, "m", chunk(0))
        rec.chunk(ROUTED, "m", chunk(1))
        assert messages(sock) == []  # held
        clock[0] += event_log.CHUNK_HOLD_S
        rec.chunk(ROUTED, "m", chunk(2))  # the oldest has waited its time: all three go
        assert [len(records) for _, records in messages(sock)] == [3]
        for seq in range(CHUNKS_PER_MESSAGE):  # the clock stands still: only the count sends
            rec.chunk(ROUTED, "m", chunk(3 + seq))
        assert [len(records) for _, records in messages(sock)] == [CHUNKS_PER_MESSAGE]
    finally:
        sock.close(0)


def test_a_pause_in_the_stream_sends_what_is_held(tmp_path):
    sock = pull(tmp_path)
    rec = EventRecorder(tmp_path)
    try:
        rec.chunk(ROUTED, "m", chunk(0))
        rec.flush()  # the stream's keep-alive
        got = messages(sock)
        rec.flush()  # nothing held: nothing sent
        assert [(topic, len(records)) for topic, records in got] == [(CHUNK_TOPIC, 1)] and messages(sock) == []
    finally:
        sock.close(0)


def test_the_eventlog_takes_only_the_shapes_the_api_sends():
    one = b"x"
    assert api_records_shape([CHUNK_TOPIC, one]) and api_records_shape([CHUNK_TOPIC] + [one] * CHUNKS_PER_MESSAGE)
    assert api_records_shape([TASK_TOPIC, one])
    assert not api_records_shape([CHUNK_TOPIC] + [one] * (CHUNKS_PER_MESSAGE + 1))
    assert not api_records_shape([TASK_TOPIC, one, one]) and not api_records_shape([CHUNK_TOPIC])
    assert not api_records_shape([b"state.event.x", one])


def test_events_show_each_record_at_the_time_the_api_streamed_it():
    """`GET /events` (`observe/events.py`): a record reaches the log later than it was streamed
    (held, then sent with others), so its own `at` is shown, not the time the log appended it."""
    from skulk.services.api.observe.events import tagged

    record = ChunkGenerated(command_id="c1", task_id="t1", model="m", seq=1, text="w", token=3, at=1.5)
    assert tagged(record, 99.0)["ChunkGenerated"]["at"] == 1.5
    assert tagged(RequestEnded(command_id="c1", task_id="t1", model="m", outcome="done", reason="stop",
                               prompt_tokens=1, completion_tokens=1, at=0.0), 99.0)["RequestEnded"]["at"] == 99.0


def test_records_the_eventlog_cannot_take_are_dropped_and_counted(tmp_path):
    """No eventlog: a thread's socket queues `HWM` messages, then drops (never waits) and counts
    each record dropped by kind in `skulk_api_event_records_dropped_total`."""
    from prometheus_client import REGISTRY

    def dropped(record: str) -> float:
        return REGISTRY.get_sample_value("skulk_api_event_records_dropped_total", {"record": record}) or 0.0

    before = {r: dropped(r) for r in ("request", "chunk")}
    rec = EventRecorder(tmp_path)  # nobody bound its endpoint
    for _ in range(event_log.HWM + 5):
        rec.routed(ROUTED, "m")
    rec.chunk(ROUTED, "m", chunk(0))
    rec.chunk(ROUTED, "m", chunk(1))
    rec.flush()
    assert dropped("request") - before["request"] == 5
    assert dropped("chunk") - before["chunk"] == 2
