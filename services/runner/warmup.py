"""What a runner runs before it says ready: the kernels its first real steps will use.

mlx compiles GPU kernels the first time a shape class or a type is used (a 4-bit model's first
prefill spent ~30 s compiling on CUDA); nothing is cached across processes. Warm-up therefore
walks, on a GPU, the step shapes serving forms: a prefill of `prefill_chunk` tokens and a short
one, decode at the batch sizes the batcher forms up to `max_batch` (powers of two and the
maximum: mlx picks its matmul kernels by size class), a sampled row (temperature, top-p, top-k,
min-p) and a constrained one (the JSON grammar's logits processor). `plan` is pure;
`run` drives the engine, every rank of a sharded instance alike (the plan depends on the
settings only), and returns how long it took.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from skulk.wire.inference import RankInsert

SHORT_PROMPT = 8
DECODE_TOKENS = 2  # a first decode step per size, and one after it


@dataclass(frozen=True, slots=True)
class Round:
    """Requests inserted together, run until all end: (prompt length, sampled, constrained) each."""

    rows: tuple[tuple[int, bool, bool], ...]
    what: str


def batch_sizes(max_batch: int) -> list[int]:
    """1, 2, 4, ... below `max_batch`, then `max_batch`."""
    sizes, n = [], 1
    while n < max_batch:
        sizes.append(n)
        n *= 2
    return sizes + [max(1, max_batch)]


def plan(max_batch: int, prefill_chunk: int, gpu: bool) -> list[Round]:
    """On a GPU the whole walk. On the CPU mlx compiles nothing per shape (its fused, shapeless
    `mx.compile` kernels are built at the first step of any size), and the walk would cost a
    Tensor-split SmolLM2 17 s of collectives: one greedy and one sampled row suffice there."""
    if not gpu:
        return [Round(((SHORT_PROMPT, False, False), (SHORT_PROMPT, True, False)), "decode x2")]
    rounds = [Round(((max(prefill_chunk, SHORT_PROMPT), False, False),), f"prefill {prefill_chunk}")]
    for n in batch_sizes(max_batch):
        rows = tuple((SHORT_PROMPT, i == 1, False) for i in range(n))  # the second row samples
        rounds.append(Round(rows, f"decode x{n}"))
    return rounds + [Round(((SHORT_PROMPT, False, True),), "constrained")]


def run(rounds: list[Round], insert: Callable[[list[RankInsert]], object], step: Callable[[], object],
        active: Callable[[], int], next_uid: Callable[[], int], vocab: int, grammar: str = "") -> float:
    """Carry out `rounds` on the engine's calls; the seconds it took."""
    t0 = time.monotonic()
    for r in rounds:
        inserts: list[RankInsert] = []
        for length, sampled, constrained in r.rows:
            uid = next_uid() + len(inserts)
            inserts.append(RankInsert(uid=uid, prompt=tuple((3 + i * 7) % max(vocab, 4) for i in range(length)),
                                      max_tokens=DECODE_TOKENS, temperature=0.7 if sampled else 0.0,
                                      top_p=0.9 if sampled else 1.0, top_k=20 if sampled else 0,
                                      min_p=0.05 if sampled else 0.0, seed=uid, cached=0,
                                      grammar=grammar if constrained else ""))
        insert(inserts)
        while active():
            step()
    return time.monotonic() - t0
