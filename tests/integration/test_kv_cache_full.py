"""A llama.cpp runner whose KV cache fills (a small `runner.kv_tokens`): requests join while
their claims fit, and when the running answers outgrow the cache the youngest is taken out
(`preempted`) and the API resumes it once there is room, so every client gets its whole answer
and no other request fails. The prompts count, so each answer is checked on its own: a number
missing, repeated or garbled at the seam of a resumed answer shows."""

from __future__ import annotations

from functools import partial
from typing import Any

from tests.integration import batch_clients as bc
from tests.integration.patience import patience
from tests.integration.real_model import REAL, REAL_DIR
from tests.integration.serving import http_json, wait_model_ready

KV = 1024
"""Four ~25-token prompts and 280 tokens each need ~1,230 cells: they all join (claims of the
prompt and 1024 // 8 tokens), and outgrow the cache when each has about 225 tokens."""
N = 280
COUNTS = [(11, "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"), (104, "Count from 100: 100, 101, 102, 103,"),
          (504, "Count from 500: 500, 501, 502, 503,"), (24, "20, 21, 22, 23,")]
"""Raw prompts whose greedy answer on the real model counts on for all of N tokens (checked with
llama.cpp's own `Llama` on the same file), and the number each answer starts with."""


def count(node: Any, prompt: str) -> tuple[int, Any]:
    return http_json(f"{node.url}/v1/completions", {"model": REAL, "prompt": prompt, "max_tokens": N,
                                                    "temperature": 0}, timeout=patience(120))


def test_answers_that_outgrow_the_kv_cache_are_preempted_and_go_on_whole(nodes, real_model):
    node = nodes(args=("--place", REAL), models={REAL_DIR: real_model}, config={"runner": {"kv_tokens": KV}})
    wait_model_ready(node, timeout=180)
    replies = bc.at_once(*(partial(count, node, prompt) for _start, prompt in COUNTS))
    for (start, prompt), (status, reply) in zip(COUNTS, replies, strict=True):
        assert status == 200, (prompt, reply)
        text = reply["choices"][0]["text"]
        want = "".join(f" {n}," for n in range(start, start + N))
        assert reply["usage"]["completion_tokens"] == N and reply["choices"][0]["finish_reason"] == "length", reply
        assert len(text) >= 3 * N // 4 and want.startswith(text), (prompt, text)
    # not vacuous: a row was taken out of the full cache, and its answer went on
    logs = node.home / "logs"
    taken = sum(log.read_text(errors="replace").count("KV cache full") for log in logs.glob("runner-*.log"))
    went_on = (logs / "api.log").read_text(errors="replace").count("preempted after")
    assert taken >= 1 and went_on >= 1, (taken, went_on)
