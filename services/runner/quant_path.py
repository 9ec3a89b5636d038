"""Quantized or bf16 on a GPU: which path serves a quantized checkpoint (the decision is pure).

mlx's quantized matmuls on CUDA do not batch: a 4-bit 8B model decoded 229 / 282 tok/s at 8 / 32
streams against 665 / 2153 for the same model in bf16. Most published MLX checkpoints are 4-bit.
So at load a runner on a GPU times the model's decode step at `max_batch` rows both ways (where
the bf16 copy fits the GPU's free memory) and serves with the faster; `runner.quantized` forces
`keep` or `dequantize`. On the CPU the runner always dequantizes (to fp32: mlx's CPU quantized
kernels are ~10x slower), so nothing is decided there.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

MARGIN = 0.10
"""bf16 must be this much faster to be worth its memory (4x a 4-bit model's)."""


class QuantMode(StrEnum):
    AUTO = "auto"
    KEEP = "keep"
    DEQUANTIZE = "dequantize"


@dataclass(frozen=True, slots=True)
class Choice:
    dequantize: bool
    why: str


def fits(bf16_bytes: int, free_bytes: int | None) -> bool:
    return free_bytes is not None and bf16_bytes <= free_bytes


def choose(mode: QuantMode, bf16_bytes: int, free_bytes: int | None, quant_ms: float | None = None,
           bf16_ms: float | None = None) -> Choice:
    """The path, and why in words (for the log and `/state`)."""
    gib = 2 ** 30
    room = ("unknown free memory" if free_bytes is None else f"{free_bytes / gib:.1f} GiB free")
    if mode is QuantMode.KEEP:
        return Choice(False, "runner.quantized: keep")
    if not fits(bf16_bytes, free_bytes):
        return Choice(False, f"the bf16 copy needs {bf16_bytes / gib:.1f} GiB, {room}")
    if mode is QuantMode.DEQUANTIZE:
        return Choice(True, "runner.quantized: dequantize")
    if quant_ms is None or bf16_ms is None:
        return Choice(False, "not timed")
    faster = bf16_ms <= quant_ms * (1 - MARGIN)
    return Choice(faster, f"decode step {quant_ms:.1f} ms quantized vs {bf16_ms:.1f} ms bf16 "
                          f"({bf16_bytes / gib:.1f} GiB, {room})")
