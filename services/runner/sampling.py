"""Per-request samplers for the batch: greedy rows share one sampler (one batched argmax);
each sampled row has its own generator seeded by the request (or by rank 0 when the client
gave no seed), so a seeded request repeats whatever else is in the batch, and every rank of a
sharded instance draws the same tokens.

mlx-lm's `make_sampler` draws from the global `mx.random` state, which the whole batch shares;
this reuses its filters (`apply_top_p`, `apply_min_p`, `apply_top_k`) with a key of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Sampler = Callable[[Any], Any]


def greedy() -> Sampler:
    from mlx_lm.sample_utils import make_sampler

    return make_sampler(temp=0.0)  # the library's one shared greedy sampler object


def make(temperature: float, top_p: float, top_k: int, min_p: float, seed: int) -> Sampler:
    """The sampler of one request: greedy at temperature 0, else its own seeded generator."""
    if temperature <= 0.0:
        return greedy()
    import mlx.core as mx
    from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

    state = {"key": mx.random.key(seed % (1 << 63))}  # any int64 seed (mlx wants 0 <= key < 2**64)
    scale = 1.0 / temperature

    def sample(logprobs: Any) -> Any:
        if 0.0 < top_p < 1.0:
            logprobs = apply_top_p(logprobs, top_p)
        if min_p > 0.0:
            logprobs = apply_min_p(logprobs, min_p)
        if 0 < top_k < logprobs.shape[-1]:  # top_k >= the vocabulary keeps every token
            logprobs = apply_top_k(logprobs, top_k)
        state["key"], sub = mx.random.split(state["key"])
        return mx.random.categorical(logprobs * scale, key=sub)

    return sample
