"""The API's event-log records (`services/api/links/event_log.py`) as the eventlog role reads
them: a request's routing, its chunks held and sent several to a message, in order, and its end;
a held record waits at most `CHUNK_HOLD_S` or `CHUNKS_PER_SEND` records."""

from __future__ import annotations

import zmq

from skulk.services.api.links import event_log
from skulk.services.api.links.event_log import EventRecorder
from skulk.wire import codec, endpoints
from skulk.wire.api_events import CHUNK_TOPIC, TASK_TOPIC, ChunkGenerated, RequestEnded, RequestRouted
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
        for seq in range(event_log.CHUNKS_PER_SEND):  # the clock stands still: only the count sends
            rec.chunk(ROUTED, "m", chunk(3 + seq))
        assert [len(records) for _, records in messages(sock)] == [event_log.CHUNKS_PER_SEND]
    finally:
        sock.close(0)
