"""A quantized model on a GPU: time its decode step both ways and keep the faster path
(`quant_path.choose` decides; this module measures). `mlx` is imported inside the functions."""

from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path
from typing import Any

from skulk.node.model_cards import runtime_bytes
from skulk.services.runner.quant_path import QuantMode, choose, fits
from skulk.wire.accelerator import nvidia_smi

log = logging.getLogger("skulk.runner")
TIMED_STEPS = 3
CONTEXT = 16  # tokens in each row's cache when the decode step is timed


def free_gpu_bytes() -> int | None:
    """What the GPU can still take: nvidia-smi's free memory (CUDA), the working set left
    (Metal); None when unknown (then no bf16 copy is made)."""
    import mlx.core as mx

    metal = getattr(mx, "metal", None)
    if metal is not None and metal.is_available():
        info = metal.device_info()
        return int(info.get("max_recommended_working_set_size", 0)) - int(mx.get_active_memory())
    rows = nvidia_smi("memory.free")  # the first GPU: the one mlx uses
    return int(rows[0][0]) * 2**20 if rows and rows[0][0].isdigit() else None


def decode_ms(model: Any, rows: int) -> float:
    """The median time of one decode step of `rows` rows (after one untimed step: the compile)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    mx.eval(model(mx.zeros((rows, CONTEXT), dtype=mx.int32), cache=cache))
    times = []
    for i in range(TIMED_STEPS + 1):
        t0 = time.perf_counter()
        mx.eval(model(mx.zeros((rows, 1), dtype=mx.int32), cache=cache))
        if i:
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def pick(model_dir: Path, model: Any, config: dict[str, Any], rows: int, mode: QuantMode) -> tuple[Any, str]:
    """(the model to serve, its engine path): the quantized one as loaded, or a bf16 copy."""
    import mlx.core as mx
    from mlx_lm.utils import dequantize_model
    from mlx_lm.utils import load_model as mlx_load_model

    bf16_bytes = runtime_bytes(sorted(model_dir.glob("*.safetensors")), config) // 2
    free = free_gpu_bytes()
    if mode is QuantMode.KEEP or not fits(bf16_bytes, free):
        choice = choose(mode, bf16_bytes, free)
        return model, f"quantized ({choice.why})"
    quant_ms = decode_ms(model, rows) if mode is QuantMode.AUTO else None
    copy, _ = mlx_load_model(model_dir, lazy=True, strict=False)
    copy = dequantize_model(copy)
    copy.set_dtype(mx.bfloat16)
    mx.eval(copy.parameters())
    bf16_ms = decode_ms(copy, rows) if mode is QuantMode.AUTO else None
    choice = choose(mode, bf16_bytes, free, quant_ms, bf16_ms)
    log.info("quantized or bf16 at %d rows: %s -> %s", rows, choice.why, "bf16" if choice.dequantize else "quantized")
    if choice.dequantize:
        del model
        mx.clear_cache()
        return copy, f"bf16, dequantized ({choice.why})"
    del copy
    mx.clear_cache()
    return model, f"quantized ({choice.why})"
