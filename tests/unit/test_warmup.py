"""Warm-up walks the step shapes serving forms (pure plan; run on the fake engine)."""

from __future__ import annotations

from skulk.services.runner import warmup
from skulk.services.runner.fake_engine import FakeEngine


def test_decode_is_warmed_at_each_size_class_up_to_max_batch():
    assert warmup.batch_sizes(16) == [1, 2, 4, 8, 16]
    assert warmup.batch_sizes(24) == [1, 2, 4, 8, 16, 24] and warmup.batch_sizes(1) == [1]


def test_on_a_gpu_the_plan_has_a_long_and_short_prefill_sampled_and_constrained_rows():
    gpu = warmup.plan(8, 256, gpu=True)
    assert gpu[0].rows == ((256, False, False),)
    assert [len(r.rows) for r in gpu[1:-1]] == [1, 2, 4, 8]
    assert all(length == warmup.SHORT_PROMPT for r in gpu[1:] for length, _, _ in r.rows)
    assert any(sampled for r in gpu for _, sampled, _ in r.rows)
    assert gpu[-1].rows == ((warmup.SHORT_PROMPT, False, True),)


def test_on_the_cpu_one_greedy_and_one_sampled_row():
    (only,) = warmup.plan(16, 256, gpu=False)
    assert only.rows == ((warmup.SHORT_PROMPT, False, False), (warmup.SHORT_PROMPT, True, False))


def test_run_drives_every_round_to_its_end_and_leaves_the_engine_empty():
    engine = FakeEngine(prefill_chunk=64)
    seen: list[list[int]] = []

    def insert(inserts):
        seen.append([len(i.prompt) for i in inserts])
        return engine.insert(inserts)

    took = warmup.run(warmup.plan(4, 64, gpu=True), insert, engine.step, engine.active, engine.next_uid, 97)
    assert seen == [[64], [8], [8, 8], [8, 8, 8, 8], [8]] and engine.active() == 0 and took >= 0
