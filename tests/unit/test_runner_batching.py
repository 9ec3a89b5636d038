"""The runner's batch loop driven with the fake engine (no MLX): admission, back-pressure,
cancel, stop strings, per-request failures, and the lock-step steps followers apply."""

from __future__ import annotations

from dataclasses import replace

import pytest

from skulk.services.runner import scheduler
from skulk.services.runner.batcher import Batcher, OutOfStep, follow
from skulk.services.runner.fake_engine import FakeEngine
from skulk.services.runner.scheduler import Admission, Limits
from skulk.wire.inference import Done, Failed, FailReason, Progress, RankStep, Started, TokenChunk
from tests.unit.batcher_driver import env, gen, run


def tokens(msgs: list[object]) -> list[int]:
    return [m.token for m in msgs if isinstance(m, TokenChunk)]


def test_admission_is_batch_then_queue_then_busy():
    limits = Limits(max_batch=2, queue_max=1)
    assert [scheduler.admit(n, limits) for n in range(4)] == [Admission.BATCH, Admission.BATCH,
                                                               Admission.QUEUE, Admission.BUSY]
    assert scheduler.joining(in_batch=1, waiting=5, limits=limits) == 1
    assert scheduler.joining(in_batch=2, waiting=5, limits=limits) == 0


def test_the_prefill_budget_is_shared_so_a_step_stays_bounded():
    assert scheduler.prefill_share(256, 1) == 256
    assert scheduler.prefill_share(256, 4) == 64
    assert scheduler.prefill_share(256, 16) == 32  # never below the floor
    assert scheduler.prefill_share(256, 0) == 256
    assert max(n * scheduler.prefill_share(256, n) for n in range(1, 17)) == 512
    assert scheduler.prefill_share(256, 1, joined=1) == 32  # a burst's first step is short


def test_context_checks_count_tokens_and_refuse_huge_prompts_before_tokenizing():
    assert scheduler.context_limit(0, 2048) == 2048 and scheduler.context_limit(1000, 2048) == 1000
    assert scheduler.context_limit(0, 0) == 0
    assert scheduler.exceeds(prompt_tokens=2000, max_tokens=49, limit=2048)
    assert not scheduler.exceeds(prompt_tokens=1999, max_tokens=49, limit=2048)
    assert scheduler.exceeds_by_size(prompt_bytes=3_000_000, max_token_bytes=16, max_tokens=5, limit=2048)
    assert not scheduler.exceeds_by_size(prompt_bytes=2000, max_token_bytes=16, max_tokens=5, limit=2048)
    assert not scheduler.exceeds_by_size(prompt_bytes=10**9, max_token_bytes=16, max_tokens=5, limit=0)


def test_requests_join_a_running_batch_and_each_gets_its_own_tokens():
    engine = FakeEngine()
    b = Batcher(engine, Limits(max_batch=8, queue_max=0))
    out = b.on_generate(env("a"), gen("a", max_tokens=6), 0.0)
    assert isinstance(out[0][1], Started) and out[0][1].queued == 0
    got: dict[str, list[object]] = {}
    for _ in range(3):  # "a" is prefilling / decoding when "b" arrives
        plan = b.plan()
        b.admit_plan(plan, 0.0)
        for e, m in b.run_step(lambda: 1.0):
            got.setdefault(e[0].decode(), []).append(m)
    b.on_generate(env("b"), gen("b", "other words", max_tokens=4), 0.0)
    for k, v in run(b).items():
        got.setdefault(k, []).extend(v)
    alone = Batcher(FakeEngine(), Limits(max_batch=8, queue_max=0))
    alone.on_generate(env("a"), gen("a", max_tokens=6), 0.0)
    assert tokens(got["a"]) == tokens(run(alone)["a"])
    for rid, n in (("a", 6), ("b", 4)):
        done = got[rid][-1]
        assert isinstance(done, Done) and done.completion_tokens == n and done.finish_reason == "length"
        assert [m.seq for m in got[rid] if isinstance(m, TokenChunk)] == list(range(n))
    assert any(isinstance(m, Progress) and m.phase == "prefill" for m in got["b"])
    assert b.pending == 0 and engine.active() == 0


def test_a_full_batch_and_queue_refuse_at_once_with_busy():
    b = Batcher(FakeEngine(), Limits(max_batch=2, queue_max=1))
    answers = [b.on_generate(env(r), gen(r), 0.0)[0][1] for r in "abcd"]
    assert [type(a).__name__ for a in answers] == ["Started", "Started", "Started", "Failed"]
    assert answers[2].queued == 1
    assert answers[3].reason == FailReason.BUSY and answers[3].retryable
    assert len(b.keep_alive()) == 3  # the three admitted wait until the first step
    b.admit_plan(b.plan(), 0.0)
    assert [m.request_id for _, m in b.keep_alive()] == ["c"]  # only the queued one


def test_a_cancel_leaves_the_others_tokens_unchanged():
    def batch(cancel: bool) -> dict[str, list[object]]:
        b = Batcher(FakeEngine(), Limits(max_batch=4, queue_max=0))
        for r in "abc":
            b.on_generate(env(r), gen(r, "prompt " + r, max_tokens=8), 0.0)
        got: dict[str, list[object]] = {}
        for i in range(6):
            if cancel and i == 4:
                ((to, ended),) = b.cancel("b")  # the stream's own reader learns it
                assert to == env("b") and isinstance(ended, Failed) and ended.reason == FailReason.CANCELLED
            plan = b.plan()
            b.admit_plan(plan, 0.0)
            if cancel and i == 4:
                assert plan.step.removes == (1,)  # the row leaves at the very next step
            for e, m in b.run_step(lambda: 1.0):
                got.setdefault(e[0].decode(), []).append(m)
        for k, v in run(b).items():
            got.setdefault(k, []).extend(v)
        return got

    full, cut = batch(False), batch(True)
    assert tokens(cut["a"]) == tokens(full["a"]) and tokens(cut["c"]) == tokens(full["c"])
    assert not any(isinstance(m, Done) for m in cut["b"])
    assert Batcher(FakeEngine(), Limits(1, 1)).cancel("nobody") == []


def test_a_stop_string_ends_the_request_and_removes_its_row():
    engine = FakeEngine()
    probe = Batcher(FakeEngine(), Limits(4, 0))
    probe.on_generate(env("a"), gen("a", max_tokens=50), 0.0)
    text = "".join(m.text for m in run(probe)["a"] if isinstance(m, TokenChunk))
    stop = text[10:12]
    b = Batcher(engine, Limits(max_batch=4, queue_max=0))
    b.on_generate(env("s"), gen("s", max_tokens=50, stop=(stop,)), 0.0)
    got = run(b)["s"]
    done = got[-1]
    assert isinstance(done, Done) and done.finish_reason == "stop"
    assert "".join(m.text for m in got if isinstance(m, TokenChunk)) == text[:text.index(stop)]
    assert engine.active() == 0 and any(line.startswith("remove") for line in engine.log)


def test_an_error_in_one_request_fails_only_that_request():
    engine = FakeEngine(poison_uid=1)
    b = Batcher(engine, Limits(max_batch=4, queue_max=0))
    for r in "abc":
        b.on_generate(env(r), gen(r, max_tokens=5), 0.0)
    got = run(b)
    assert isinstance(got["b"][-1], Failed) and got["b"][-1].reason == FailReason.ENGINE_ERROR
    assert isinstance(got["a"][-1], Done) and isinstance(got["c"][-1], Done)


def test_an_oversized_prompt_is_refused_with_the_context_reason():
    b = Batcher(FakeEngine(), Limits(max_batch=4, queue_max=4))
    huge = b.on_generate(env("h"), gen("h", "x" * 3_000_000), 0.0)[0][1]
    near = b.on_generate(env("n"), gen("n", "x" * 60, max_tokens=5), 0.0)[0][1]  # 60 + 5 > 64
    fits = b.on_generate(env("f"), gen("f", "x" * 50, max_tokens=5), 0.0)[0][1]
    assert huge.reason == near.reason == FailReason.CONTEXT_LENGTH_EXCEEDED and not huge.retryable
    assert huge.error.startswith("context_length_exceeded:")
    assert isinstance(fits, Started) and fits.prompt_tokens == 50


def test_followers_apply_the_same_steps_and_stay_alike():
    leader, follower = FakeEngine(), FakeEngine()
    b = Batcher(leader, Limits(max_batch=2, queue_max=8))
    for r in "abcde":
        b.on_generate(env(r), gen(r, "shared prefix " + r, max_tokens=3), 0.0)
    run(b, followers=[follower])
    b.on_generate(env("f"), gen("f", "shared prefix a", max_tokens=3), 0.0)  # a prefix-cache hit
    run(b, followers=[follower])
    assert follower.log == leader.log and follower.cache == leader.cache
    assert follower.uid_count == leader.uid_count == 6


def test_a_follower_out_of_step_fails_loudly():
    follower = FakeEngine()
    with pytest.raises(OutOfStep):
        follow(follower, RankStep(seq=2, cache_entries=0), expected_seq=1)
    b = Batcher(FakeEngine(cache=[tuple(range(3, 40))]), Limits(2, 2))  # the leader has a cache entry
    b.on_generate(env("a"), gen("a", max_tokens=2), 0.0)
    step = b.admit_plan(b.plan(), 0.0)
    with pytest.raises(OutOfStep):  # the follower's cache does not hold it
        follow(follower, RankStep(seq=1, cache_entries=5, inserts=tuple(
            i.__class__(**{**{f: getattr(i, f) for f in i.__slots__}, "cached": 7}) for i in step.inserts)),
            expected_seq=1)


def test_sampled_requests_get_a_seed_from_rank_0_and_keep_a_given_one():
    b = Batcher(FakeEngine(), Limits(4, 0), draw_seed=lambda: 1234)
    b.on_generate(env("a"), gen("a", temperature=0.7), 0.0)
    seeded = gen("b", temperature=0.7)
    from dataclasses import replace
    b.on_generate(env("b"), replace(seeded, params=replace(seeded.params, seed=7)), 0.0)
    step = b.admit_plan(b.plan(), 0.0)
    assert [(i.seed, i.temperature) for i in step.inserts] == [(1234, 0.7), (7, 0.7)]


def test_a_cancel_during_a_long_prefill_stops_it_within_one_chunk():
    engine = FakeEngine(prefill_chunk=4, model_context=1000)
    b = Batcher(engine, Limits(max_batch=4, queue_max=0))
    b.on_generate(env("long"), gen("long", "y" * 200, max_tokens=4), 0.0)
    progress = []
    for _ in range(3):
        b.admit_plan(b.plan(), 0.0)
        progress += [m for _, m in b.run_step(lambda: 1.0) if isinstance(m, Progress)]
    assert [p.processed for p in progress] == [4, 8, 12] and progress[0].total == 200
    assert b.cancel("long")
    plan = b.plan()
    b.admit_plan(plan, 0.0)
    assert plan.step.removes == (0,) and engine.active() == 0
    assert b.run_step(lambda: 1.0) == [] and b.plan() is None


def test_requests_that_cannot_join_fail_alone_and_the_batch_goes_on():
    class Refusing(FakeEngine):
        def insert(self, inserts):  # e.g. a sampler the library refuses
            if any(len(i.prompt) == 3 for i in inserts):
                raise ValueError("cannot insert")
            return super().insert(inserts)

    engine = Refusing()
    b = Batcher(engine, Limits(max_batch=4, queue_max=0))
    b.on_generate(env("a"), gen("a", "fine prompt", max_tokens=4), 0.0)
    b.admit_plan(b.plan(), 0.0)
    b.run_step(lambda: 1.0)
    b.on_generate(env("x"), gen("x", "bad", max_tokens=4), 0.0)
    step = b.admit_plan(b.plan(), 0.0)
    assert step.inserts == ()  # the other ranks insert nothing either
    first = b.run_step(lambda: 1.0)
    assert [(e[0], type(m).__name__) for e, m in first if e[0] == b"x"] == [(b"x", "Failed")]
    rest = run(b)
    assert isinstance(rest["a"][-1], Done) and b.pending == 0


def test_a_continuation_with_a_token_outside_the_vocabulary_is_refused_not_prefilled():
    """A resumed answer's tokens come from a frame: an id past the embedding would crash the
    engine natively (a fuzzed frame did), so it is a bad request at once."""
    engine = FakeEngine()
    engine.vocab_size = 100  # type: ignore[attr-defined]
    b = Batcher(engine, Limits(max_batch=2, queue_max=0))
    bad = gen("a")
    bad = replace(bad, params=replace(bad.params, continuation=(5, 100)))
    ((_, answer),) = b.on_generate(env("a"), bad, 0.0)
    assert isinstance(answer, Failed) and answer.reason == FailReason.BAD_REQUEST and "vocabulary" in answer.error
    good = gen("b")
    good = replace(good, params=replace(good.params, continuation=(5, 99)))
    assert type(b.on_generate(env("b"), good, 0.0)[0][1]).__name__ == "Started"


def test_the_kv_claim_counts_what_a_request_holds_and_its_next_growth_and_none_passes_a_long_prompt():
    assert scheduler.kv_claim(100, 500, 16384) == 100 + scheduler.GROWTH_TOKENS
    assert scheduler.kv_claim(100, 10, 16384) == 110 and scheduler.kv_claim(100, -3, 16384) == 100
    assert scheduler.kv_claim(100, 500, 1024) == 100 + 1024 // 8  # a small cache: an eighth of it
    assert scheduler.kv_joining(0, [10**9], [5, 6, 7]) == 3  # no fixed cache: room in the batch decides
    assert scheduler.kv_joining(1000, [], [2000, 10]) == 1  # the first waits for no one when nothing runs
    assert scheduler.kv_joining(1000, [600], [300, 50, 60]) == 2
    assert scheduler.kv_joining(1000, [600], [500, 50]) == 0  # the short one does not pass the long one
    assert scheduler.kv_joining(1000, [], [600, 500]) == 1


def test_a_full_kv_cache_preempts_the_youngest_row_alone_and_newcomers_wait_for_room():
    """An engine whose KV cache has a fixed size: requests join while their claims fit, wait
    while they do not, and when the running answers outgrow the cache the youngest row alone is
    taken out, its request ending `preempted` (retryable: the API resumes it) while the others go on."""
    capacity = 600  # claims of 150 + 600 // 8: two fit, three do not
    engine = FakeEngine(kv_capacity=capacity, model_context=capacity)
    b = Batcher(engine, Limits(max_batch=8, queue_max=8))
    for rid in "abc":
        b.on_generate(env(rid), gen(rid, "x" * 150, max_tokens=400), 0.0)
    plan = b.plan()
    assert [s.request_id for s in plan.joiners] == ["a", "b"]  # c's claim does not fit beside theirs
    b.admit_plan(plan, 0.0)
    got: dict[str, list[object]] = {}
    for e, m in b.run_step(lambda: 1.0):
        got.setdefault(e[0].decode(), []).append(m)
    for rid, msgs in run(b, limit=2000).items():
        got.setdefault(rid, []).extend(msgs)
    (preempted,) = [m for m in got["b"] if isinstance(m, Failed)]
    assert preempted.reason == FailReason.PREEMPTED and preempted.retryable, preempted
    assert 0 < len(tokens(got["b"])) < 400
    assert len(tokens(got["a"])) == 400 and isinstance(got["a"][-1], Done)  # the oldest goes on throughout
    assert engine.log.index("insert 2") > engine.log.index("preempt 1")  # c waited for room
    assert isinstance(got["c"][-1], (Done, Failed))  # every request ends, none waits for ever
    assert not b.running and not b.waiting and not b.by_request
