"""Values a runner refuses at admission (found by fuzzing its port): a request that would fail
inside the engine's insert must not take its co-joiners down with it, and a stranger's huge id
never reaches a log line."""

from __future__ import annotations

import math

from skulk.cluster.state import ChatMessage, TaskParams
from skulk.services.runner import admission
from skulk.services.runner.batcher import Batcher
from skulk.services.runner.fake_engine import FakeEngine
from skulk.services.runner.scheduler import Limits
from skulk.wire.inference import Failed, FailReason, Generate, Started


def gen(rid: str, **params) -> Generate:
    fields = {"model": "m", "messages": (ChatMessage(role="user", content="hi"),), "max_tokens": 4, **params}
    return Generate(request_id=rid, task_id="t" + rid, params=TaskParams(**fields))


def test_values_the_engine_cannot_take_are_named():
    ok = gen("a").params
    assert admission.request_error(ok) == ""
    assert "max_tokens" in admission.request_error(gen("a", max_tokens=0).params)
    assert "max_tokens" in admission.request_error(gen("a", max_tokens=-5).params)
    assert "temperature" in admission.request_error(gen("a", temperature=math.nan).params)
    assert "top_p" in admission.request_error(gen("a", top_p=-math.inf).params)
    # a min_p or top_p above 1 made mlx-lm's sampler raise inside a step: the runner crashed (found
    # by the rank fuzzer in the suite)
    assert admission.request_error(gen("a", min_p=225752.4).params) == "min_p must be between 0 and 1, got 225752.4"
    assert "top_p must be between 0 and 1" in admission.request_error(gen("a", top_p=1.5).params)
    assert admission.request_error(gen("a", top_p=1.0, min_p=0.0, temperature=2.5).params) == ""
    assert "top_k" in admission.request_error(gen("a", top_k=-1).params)
    assert "top_logprobs" in admission.request_error(gen("a", top_logprobs=-1).params)
    assert admission.request_error(gen("a", grammar="garbage").params).startswith("response_format: ")
    assert admission.request_error(gen("a", grammar='%llguidance {}\nstart: "a"').params) == ""


def test_a_bad_request_is_refused_alone_and_its_neighbour_joins():
    b = Batcher(FakeEngine(), Limits(max_batch=8, queue_max=0))
    bad = b.on_generate([b"x"], gen("bad", grammar="not a grammar"), 0.0)
    good = b.on_generate([b"y"], gen("good"), 0.0)
    assert isinstance(bad[0][1], Failed) and bad[0][1].reason == FailReason.BAD_REQUEST
    assert isinstance(good[0][1], Started)
    step = b.admit_plan(b.plan(), 0.0)
    assert [i.uid for i in step.inserts] == [0] and not b.failed_joiners


def test_a_huge_id_is_refused_before_it_is_logged(caplog):
    b = Batcher(FakeEngine(), Limits(max_batch=8, queue_max=0))
    msg = Generate(request_id="x" * 1_000_000, task_id="t", params=gen("a").params)
    with caplog.at_level("INFO"):
        out = b.on_generate([b"x"], msg, 0.0)
    assert isinstance(out[0][1], Failed) and out[0][1].reason == FailReason.BAD_REQUEST
    assert len(out[0][1].request_id) == admission.MAX_ID_CHARS and not caplog.records
