"""Rank 0's scheduling decisions (pure): admit, queue or refuse a request; whether a prompt
fits the context; which waiting requests join the batch at the next step.

Requests beyond `max_batch` wait in a bounded FIFO behind the batch; when both are full a new
request is refused at once with a retryable `busy` (the API's 503), never left waiting.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Admission(StrEnum):
    BATCH = "batch"  # joins the running batch at the next step
    QUEUE = "queue"  # waits behind the batch
    BUSY = "busy"  # refused: batch and queue are full


@dataclass(frozen=True, slots=True)
class Limits:
    max_batch: int  # requests in the running batch at once (`runner.max_batch`)
    queue_max: int  # requests waiting behind it (`runner.queue_max`)


def admit(pending: int, limits: Limits) -> Admission:
    """Where a new request goes, given how many the runner holds now (in the batch or waiting;
    first come, first served)."""
    if pending < limits.max_batch:
        return Admission.BATCH
    if pending < limits.max_batch + limits.queue_max:
        return Admission.QUEUE
    return Admission.BUSY


def joining(in_batch: int, waiting: int, limits: Limits) -> int:
    """How many waiting requests join the batch at this step (FIFO)."""
    return max(0, min(waiting, limits.max_batch - in_batch))


GROWTH_TOKENS = 256
"""Tokens of its answer a request's KV claim counts ahead (or what is left of its max_tokens,
if less; an eighth of a smaller cache at most): room for the running answers to grow before a
newcomer may take it."""


def kv_claim(tokens: int, left: int, capacity: int) -> int:
    """KV cells a request counts on in a cache of `capacity`: what it holds (prompt and answer so
    far) and its growth."""
    return tokens + min(max(0, left), GROWTH_TOKENS, capacity // 8)


def kv_joining(capacity: int, running: list[int], waiting: list[int]) -> int:
    """How many of the waiting requests (their `kv_claim`s, FIFO) fit beside the running ones'
    in a KV cache of `capacity` cells (0: the engine's cache has no fixed size: all of them). The
    first waits for no one when nothing runs (it fits alone: the context limit is within the cache),
    and none passes one that does not fit, so a long prompt is never starved by short ones."""
    if capacity <= 0:
        return len(waiting)
    used, n = sum(running), 0
    for claim in waiting:
        if used + claim > capacity and (running or n):
            break
        used, n = used + claim, n + 1
    return n


MIN_PREFILL_SHARE = 32
"""Fewest prompt tokens a prefilling request gets per step."""


def prefill_share(budget: int, prefilling: int, joined: int = 0) -> int:
    """Prompt tokens each prefilling request gets this step: `runner.prefill_chunk` tokens per
    step in all, shared, so one step's work stays bounded however many prompts arrive at once
    (the heartbeat is beaten between steps) and running streams keep flowing.

    A step where requests just joined takes only the smallest share: clients of a burst reach
    the runner a few milliseconds apart (each is routed by the master first), and a first
    request that prefilled its whole prompt alone made the rest wait a full prefill before
    theirs began (the TTFT of 8 concurrent clients swung between 2.0 and 3.0 s). With a short
    first step the burst is prefilled as one batch, without any admission window."""
    if joined:
        return MIN_PREFILL_SHARE
    return max(MIN_PREFILL_SHARE, budget // max(1, prefilling))


def prefill_in_order(budget: int, remaining: list[int]) -> list[int]:
    """Prompt tokens each prefilling request gets this step, first come first served: the oldest
    takes what it still needs of `budget`, the next the rest, and so on. Where each step costs
    what its tokens cost (llama.cpp on a CPU: its kernels are compute-bound, a shared step is no
    cheaper than the same tokens in order), serving prompts in order brings the first answers
    sooner at no cost to the last (8 prompts at once: TTFT p50 about half the shared prefill's)."""
    shares = []
    for need in remaining:
        take = max(0, min(need, budget))
        shares.append(take)
        budget -= take
    return shares


def context_limit(instance_limit: int, model_limit: int) -> int:
    """The usable context in tokens: the smaller of the instance's (memory) and the model's
    own; 0 where neither is known."""
    known = [x for x in (instance_limit, model_limit) if x > 0]
    return min(known) if known else 0


def exceeds_by_size(prompt_bytes: int, max_token_bytes: int, max_tokens: int, limit: int) -> bool:
    """True when the prompt cannot fit even before tokenizing it: no token covers more than
    `max_token_bytes` bytes, so the prompt has at least `prompt_bytes / max_token_bytes`
    tokens. A 3,000,000-character message is refused without spending seconds in the tokenizer."""
    return limit > 0 and prompt_bytes // max(1, max_token_bytes) + max_tokens > limit


def exceeds(prompt_tokens: int, max_tokens: int, limit: int) -> bool:
    return limit > 0 and prompt_tokens + max_tokens > limit


def context_message(prompt_tokens: int, max_tokens: int, limit: int, at_least: bool = False) -> str:
    """Upstream's 400 wording (the API maps the reason, not these words); `at_least` when the
    prompt was measured by its size, before tokenizing."""
    size = f"at least {prompt_tokens}" if at_least else str(prompt_tokens)
    return (f"context_length_exceeded: the prompt ({size} tokens) plus max_tokens ({max_tokens}) "
            f"cannot fit within this model's usable context limit of {limit} tokens; shorten the "
            "prompt or lower max_tokens")
