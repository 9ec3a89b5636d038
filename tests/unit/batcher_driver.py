"""Drives the runner's batch loop (`Batcher`, with the fake engine in the tests): a request
(`gen`), its envelope (`env`), and `run`, which steps the loop until it is idle."""

from __future__ import annotations

from skulk.cluster.state import ChatMessage, TaskParams
from skulk.services.runner.batcher import Batcher, follow
from skulk.services.runner.fake_engine import FakeEngine
from skulk.wire.inference import Generate


def gen(rid: str, text: str = "hello", max_tokens: int = 5, stop: tuple[str, ...] = (),
        context_limit: int = 0, temperature: float | None = None) -> Generate:
    return Generate(request_id=rid, task_id="t" + rid, context_limit=context_limit, params=TaskParams(
        model="m", messages=(ChatMessage(role="user", content=text),), max_tokens=max_tokens, stop=stop,
        temperature=temperature))


def env(rid: str) -> list[bytes]:
    return [rid.encode()]


def run(b: Batcher, followers: list[FakeEngine] = (), limit: int = 200) -> dict[str, list[object]]:
    """Step until idle; every message per request, and each follower applies every step."""
    got: dict[str, list[object]] = {}
    for _ in range(limit):
        plan = b.plan()
        if plan is None:
            return got
        step = b.admit_plan(plan, 0.0)
        for f in followers:
            follow(f, step, step.seq)
        for envelope, msg in b.run_step(lambda: 1.0):
            got.setdefault(envelope[0].decode(), []).append(msg)
    raise AssertionError("the batch never went idle")
