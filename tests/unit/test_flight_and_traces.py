"""The runner's flight recorder (phase changes, bounded progress, the stall watch) and the spans
of traced requests, driven with the fake engine (no MLX)."""

from __future__ import annotations

import json
import threading
from dataclasses import replace

from skulk.services.runner.batcher import Batcher, follow
from skulk.services.runner.fake_engine import FakeEngine
from skulk.services.runner.flight import FlightRecorder, Ident, StallWatch
from skulk.services.runner.scheduler import Limits
from skulk.services.runner.tracing import RankTraces
from skulk.wire.flight import PHASES
from skulk.wire.inference import Done
from tests.unit.batcher_driver import env, gen

IDENT = Ident("r1", "i1", "m", "n1", 0, 2)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_phase_changes_are_entries_and_progress_is_bounded():
    clock = Clock()
    rec = FlightRecorder(IDENT, memory=lambda: None, capacity=4, progress_every_s=1.0, clock=clock)
    first = rec.enter("load_model", "m")
    assert first is not None and first.phase == "load_model" and first.phase_since == 1000.0
    assert rec.enter("load_model") is None  # nothing new
    clock.t += 0.5
    assert rec.progress() is None  # the last entry is only 0.5 s old
    clock.t += 0.6
    moved = rec.progress({"batch": 1})
    assert moved is not None and moved.event == "progress" and moved.last_progress_at == 1001.1
    assert moved.phase_since == 1000.0  # still the same phase
    note = rec.note("admitted", task_id="t1", command_id="c1", phase="task_submission")
    assert (note.phase, note.task_id, note.command_id) == ("task_submission", "t1", "c1")
    for phase in ("prefill_stream", "decode_stream", "idle"):
        rec.enter(phase)
    assert len(rec.entries()) == 4 and [e.seq for e in rec.entries()] == [2, 3, 4, 5]  # the ring is bounded
    assert all(e.phase in PHASES for e in rec.entries())


def test_the_stall_watch_reports_a_step_that_does_not_return():
    rec = FlightRecorder(IDENT, memory=lambda: None)
    got: list = []
    seen = threading.Event()
    watch = StallWatch(rec, lambda e: (got.append(e), seen.set()), stall_after_s=0.1, every_s=0.1)
    try:
        watch.begin(7, prefill=False)
        assert seen.wait(5), "no stall entry within 5 s"
        entry = got[0]
        assert (entry.phase, entry.event, entry.attrs["step"]) == ("decode_barrier", "waiting_on_ranks", 7)
    finally:
        watch.stop()


def test_a_traced_request_leaves_its_rank_spans_on_every_rank(tmp_path):
    engine, follower = FakeEngine(), FakeEngine()
    traces = RankTraces(tmp_path / "r0", "n1", "one", "m", 0)
    other = RankTraces(tmp_path / "r1", "n2", "two", "m", 1)
    b = Batcher(engine, Limits(max_batch=4, queue_max=4), traces=traces)
    b.on_generate(env("a"), replace(gen("a", max_tokens=4), trace=True), 0.0)
    b.on_generate(env("b"), gen("b", max_tokens=4), 0.0)  # not traced: no spans
    for _ in range(50):
        plan = b.plan()
        if plan is None:
            break
        step = b.admit_plan(plan, 0.0)
        for ins in step.inserts:
            if ins.trace_task:
                other.joined_follower(ins.uid, ins.trace_task)
        out = follow(follower, step, step.seq)
        other.step(step.seq, 1, 2, {p.uid for p in out.prompts}, {t.uid for t in out.tokens}, 2)
        other.ended_uids(set(step.removes) | {t.uid for t in out.tokens if t.finish is not None})
        for _envelope, msg in b.run_step(lambda: 1.0):
            if isinstance(msg, Done):
                traces.ended_request(msg.request_id)
    assert traces.flush() and other.flush()  # written off the loop, by the writer thread
    assert [p.name for p in (tmp_path / "r0" / "traces").iterdir()] == ["ta"]
    rank0 = json.loads((tmp_path / "r0" / "traces" / "ta" / "rank0.json").read_text())
    cats = [s["category"] for s in rank0["spans"]]
    assert cats[0] == "queue" and cats.count("decode") == 4 and "detokenize" in cats
    rank1 = json.loads((tmp_path / "r1" / "traces" / "ta" / "rank1.json").read_text())
    assert [s["category"] for s in rank1["spans"]].count("decode") == 4
    assert rank1["nodeId"] == "n2" and all(s["rank"] == 1 for s in rank1["spans"])
    assert not traces and not other  # nothing left open
