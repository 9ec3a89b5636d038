"""The next token of each row from its logits (numpy; the model's step is llama.cpp's).

Greedy rows take the arg-max, as llama.cpp's greedy sampler does (the first of equal logits),
so a greedy answer is token for token llama.cpp's own. A sampled row has its own generator
seeded by the request: temperature, then top-k, top-p and min-p filters as the MLX path applies
them, then one draw. A constrained row's logits are masked by its grammar first.
"""

from __future__ import annotations

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities of one row of logits (float32 in, float32 out)."""
    shifted = logits - np.max(logits)
    return shifted - np.log(np.sum(np.exp(shifted)))


class Sampler:
    """One request's sampler: greedy at temperature 0, else seeded draws."""

    def __init__(self, temperature: float, top_p: float, top_k: int, min_p: float, seed: int) -> None:
        self.greedy = temperature <= 0.0
        self.temperature, self.top_p, self.top_k, self.min_p = temperature, top_p, top_k, min_p
        self.rng = np.random.default_rng(seed % (1 << 63))

    def __call__(self, logits: np.ndarray) -> int:
        if self.greedy:
            return int(np.argmax(logits))
        logprobs = log_softmax(logits.astype(np.float32) / self.temperature)
        keep = np.isfinite(logprobs)
        if 0 < self.top_k < logprobs.shape[-1]:
            kth = np.partition(logprobs, -self.top_k)[-self.top_k]
            keep &= logprobs >= kth
        if 0.0 < self.top_p < 1.0:
            keep &= nucleus(logprobs, self.top_p)
        if self.min_p > 0.0:
            keep &= logprobs >= np.max(logprobs) + np.log(self.min_p)
        probs = np.where(keep, np.exp(logprobs), 0.0)
        total = probs.sum()
        if not total > 0.0:  # every token filtered (never with a finite row): fall back to greedy
            return int(np.argmax(logits))
        return int(self.rng.choice(probs.shape[-1], p=probs / total))


NUCLEUS_FIRST = 1024
"""Candidates sorted first for top-p: a nucleus is almost always among them (a full sort of a
50k vocabulary costs milliseconds a token)."""


def nucleus(logprobs: np.ndarray, top_p: float) -> np.ndarray:
    """The smallest set of most likely tokens whose probability reaches `top_p` (a mask)."""
    n = logprobs.shape[-1]
    head = np.argpartition(-logprobs, NUCLEUS_FIRST - 1)[:NUCLEUS_FIRST] if n > NUCLEUS_FIRST else np.arange(n)
    order = head[np.argsort(-logprobs[head])]
    mass = np.cumsum(np.exp(logprobs[order]))
    if mass[-1] < top_p and len(order) < n:  # a flat distribution: sort it all
        order = np.argsort(-logprobs)
        mass = np.cumsum(np.exp(logprobs[order]))
    cut = int(np.searchsorted(mass, top_p)) + 1
    mask = np.zeros(n, dtype=bool)
    mask[order[:cut]] = True
    return mask


def top_logprobs(logprobs: np.ndarray, token: int, k: int) -> tuple[float, list[tuple[int, float]]]:
    """The token's log-probability and the `k` most likely (token, logprob), best first."""
    top: list[tuple[int, float]] = []
    k = min(k, logprobs.shape[-1])
    if k > 0:
        ids = np.argpartition(-logprobs, k - 1)[:k]
        top = sorted(((int(i), float(logprobs[i])) for i in ids), key=lambda p: -p[1])
    return float(logprobs[token]), top
