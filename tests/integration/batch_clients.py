"""Helpers for the batching tests: many chat requests at once, each result kept as its tokens
(bytes and logprobs), and a comparison of two token lists that says where they first differ."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from tests.integration.patience import patience
from tests.integration.serving import MODEL, http_json

WORDS = ("beautiful better ugly explicit implicit simple complex flat nested sparse dense "
         "readability counts special cases rules practicality purity errors silently").split()


def prompt(i: int) -> str:
    """A distinct prompt per index (deterministic)."""
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(12 + i % 5))


def body(text: str, n: int, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": n, "temperature": 0, "logprobs": True,
            "messages": [{"role": "user", "content": text}], **extra}


def tokens_of(reply: dict[str, Any]) -> list[tuple[tuple[int, ...], float]]:
    return [(tuple(c["bytes"]), c["logprob"]) for c in reply["choices"][0]["logprobs"]["content"]]


def complete(url: str, payload: dict[str, Any], timeout: float | None = None) -> tuple[int, Any]:
    return http_json(f"{url}/v1/chat/completions", payload, timeout=patience(40) if timeout is None else timeout)


def all_at_once(url: str, payloads: list[dict[str, Any]], timeout: float | None = None) -> list[tuple[int, Any]]:
    return at_once(*(partial(complete, url, p, timeout) for p in payloads))


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Each call in a thread of its own, all started together: their results, in order (requests
    a batch answers in one step each where asked one after another they would take one each)."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result() for f in [pool.submit(call) for call in calls]]


def compare(alone: list[tuple[tuple[int, ...], float]], batched: list[tuple[tuple[int, ...], float]],
            logprob_tol: float) -> str:
    """"" when the tokens are identical and every logprob within `logprob_tol`; else where
    and how they first differ (for the assertion message)."""
    for i, ((ta, la), (tb, lb)) in enumerate(zip(alone, batched)):
        if ta != tb or abs(la - lb) > logprob_tol:
            return f"first difference at token {i}: {ta}/{la:.5f} alone vs {tb}/{lb:.5f} batched"
    if len(alone) != len(batched):
        return f"lengths differ: {len(alone)} alone vs {len(batched)} batched"
    return ""


def max_logprob_gap(a: list[tuple[tuple[int, ...], float]], b: list[tuple[tuple[int, ...], float]]) -> float:
    return max((abs(x[1] - y[1]) for x, y in zip(a, b)), default=0.0)
