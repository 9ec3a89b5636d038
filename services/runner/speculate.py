"""Speculative decoding by prompt lookup, for a lone greedy stream in the batching runner.

While the batch holds at most `max_streams` (1) streams, all decoding with no logits processor,
a step proposes up to `k` tokens from n-grams of the request's own prompt and output
(`propose`: the longest recent n-gram seen before, and what followed it), runs the target model
once over the current token and the drafts, and keeps the drafts the target's own choice agrees
with (`accepted`: its greedy token, or for a sampled row a draw of its own seeded sampler at
each position, mlx-lm's speculative rule), plus the target's next token: up to k+1 tokens for
one forward. The
rejected drafts are trimmed from the KV cache, so the cache, the tokens and the answer are the
ones plain decoding gives (greedy: the same tokens; sampled: the target's distribution, and a
seeded request repeats). Any other batch (a second stream joins, a prompt is prefilling, a
constrained row) takes mlx-lm's plain batched step, and a stream moves between the
two between steps with nothing to hand over (it is the same cache).

It drives mlx-lm's `GenerationBatch` directly (its cache, its next token, its stop matcher),
as `GenerationBatch.next` does for one token. `propose` and `accepted` are pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

NGRAM_MAX = 3
NGRAM_MIN = 2
LOOKBACK = 4096
"""Tokens of context searched for the n-gram (the newest): a step's proposal stays cheap."""


class SpecMode(StrEnum):
    OFF = "off"
    PROMPT_LOOKUP = "prompt_lookup"
    DRAFTER = "drafter"


@dataclass(frozen=True, slots=True)
class SpecSettings:
    mode: SpecMode = SpecMode.OFF
    num_draft_tokens: int = 4
    max_streams: int = 1
    drafter: str = ""  # drafter mode: the drafter's model id ("": the one the model's card names)


def propose(context: Sequence[int], k: int, ngram_max: int = NGRAM_MAX, ngram_min: int = NGRAM_MIN) -> list[int]:
    """Up to `k` tokens that followed the latest earlier occurrence of the context's longest
    suffix n-gram (longest first); [] when no suffix of at least `ngram_min` recurs."""
    window = list(context[-LOOKBACK:])
    size = len(window)
    for n in range(min(ngram_max, size - 1), ngram_min - 1, -1):
        tail = window[size - n:]
        for start in range(size - n - 1, -1, -1):  # the newest earlier occurrence
            if window[start:start + n] == tail:
                follow = window[start + n:start + n + k]
                if follow:
                    return follow
    return []


def accepted(drafts: Sequence[int], choices: Sequence[int]) -> int:
    """How many leading drafts the target chose itself (`choices[i]`: its greedy token after the
    current token and drafts[:i])."""
    n = 0
    for draft, choice in zip(drafts, choices):
        if draft != choice:
            break
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class Emitted:
    """One token a speculative step gives a stream (the first of a step carries its counts)."""

    uid: int
    token: int
    logprobs: Any
    finish: str | None
    prompt_cache: Any = None
    all_tokens: list[int] | None = None
    accepted: int = 0
    rejected: int = 0


def step(gen: Any, settings: SpecSettings, rows: dict[int, bool], drafter: Any = None) -> list[Emitted] | None:
    """One speculative step on `gen` (an mlx-lm BatchGenerator), or None where it does not apply
    (the caller then takes the plain step). `rows`: the uids that may speculate (no grammar),
    True where greedy."""
    import mlx.core as mx

    if settings.mode is SpecMode.OFF or (settings.mode is SpecMode.DRAFTER and drafter is None) \
            or gen._unprocessed_sequences or len(gen._prompt_batch):  # noqa: SLF001
        return None
    gb = gen._generation_batch  # noqa: SLF001
    if len(gb) != 1 or len(gb) > settings.max_streams or gb._next_tokens is None:  # noqa: SLF001
        return None
    uid = gb.uids[0]
    if uid not in rows or (gb.logits_processors and gb.logits_processors[0]):
        return None
    if not all(c.is_trimmable() for c in gb.prompt_cache):  # state-space layers, a full sliding window:
        return None  # rejected drafts could not be taken back out
    with mx.stream(gen.stream):  # where mlx-lm computes this batch (no sync between streams)
        out = _verify(gb, uid, settings, rows[uid], drafter)
    if out is not None:
        gen._counters.generation_tokens += len(out)  # noqa: SLF001 - as BatchGenerator counts its steps
        gen._counters.generation_steps += 1  # noqa: SLF001
        if gen._counters.generation_steps % 512 == 0:  # noqa: SLF001 - and frees its buffers
            mx.clear_cache()
    return out


def _verify(gb: Any, uid: int, settings: SpecSettings, greedy: bool, drafter: Any) -> list[Emitted] | None:
    import mlx.core as mx

    y = int(gb._next_tokens[0].item())  # noqa: SLF001 - sampled by the last step, not yet fed in
    y_logprobs = gb._next_logprobs[0]  # noqa: SLF001
    room = gb.max_tokens[0] - gb._num_tokens[0] - 1  # noqa: SLF001 - tokens after y it may still emit
    k = min(settings.num_draft_tokens, room)
    if k <= 0:
        return None
    context = [*gb.tokens[0], y]
    drafts = drafter.propose(context, k) if settings.mode is SpecMode.DRAFTER else propose(context, k)
    if not drafts:
        return None
    logits = gb.model(mx.array([[y, *drafts]]), cache=gb.prompt_cache)[0]
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    if greedy:
        choices = cast(list[int], mx.argmax(logprobs, axis=-1).tolist())  # argmax over rows: one int a row
    else:  # mlx-lm's rule: the row's own sampler draws at every position, a draft stays while it
        # equals the draw, so each kept token is a draw from the target given the ones before it
        sampler = gb.samplers[0]
        choices = [int(sampler(logprobs[i:i + 1]).item()) for i in range(len(drafts) + 1)]
    a = accepted(drafts, choices)
    tokens, lps = [y, *drafts[:a]], [y_logprobs, *(logprobs[i] for i in range(a))]
    finishes: list[str | None] = []
    for tok in tokens:  # where the row ends, if it ends in this step (EOS, a stop sequence, length)
        gb._num_tokens[0] += 1  # noqa: SLF001
        finish = "length" if gb._num_tokens[0] >= gb.max_tokens[0] else None  # noqa: SLF001
        if gb._matchers[0].advance(tok):  # noqa: SLF001
            finish = "stop"
        finishes.append(finish)
        if finish is not None:
            break
    end = len(finishes) - 1  # the last token given (drafts kept: the `end` after y)
    out = [Emitted(uid, tok, lp, fin, accepted=end if j == 0 else 0, rejected=len(drafts) - end if j == 0 else 0)
           for j, (tok, lp, fin) in enumerate(zip(tokens, lps, finishes))]
    _trim(gb.prompt_cache, len(drafts) - end)  # the cache ends at the last token given
    gb.tokens[0].extend(tokens[:end + 1])
    if finishes[-1] is not None:
        last = out[-1]
        out[-1] = Emitted(uid, last.token, last.logprobs, last.finish, gb.extract_cache(0), gb.tokens[0],
                          last.accepted, last.rejected)
        gb.filter([])
        return out
    gb._next_tokens = mx.array([choices[a]], dtype=mx.uint32)  # noqa: SLF001 - the target's own next token
    gb._next_logprobs = [logprobs[a]]  # noqa: SLF001
    return out


def _trim(cache: list[Any], n: int) -> None:
    if n > 0:
        for c in cache:
            c.trim(n)
