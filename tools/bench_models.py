"""The models the benchmarks run, and the baseline's copy of each in the dtype Skulk runs.

`--sizes` names them: `tiny` and `100m` (random demo models, fp32 as stored), `smollm2` (the
real SmolLM2-135M-Instruct, imported from its GGUF package as `skulk model demo` does: 4-bit),
and for a GPU `8b` (a random model of Llama-3-8B's shape, bf16, 14 GB, built on the device) and
`8b-4bit` (mlx-lm's 4-bit quantization of it). On the CPU Skulk's runner dequantizes a quantized
model and runs fp32, while mlx_lm.server runs what is stored: its quantized CPU matmuls are ~10x
slower, which would compare two kernels, not two servers. So on the CPU the baseline gets a copy
dequantized to fp32 by mlx-lm's own converter, the dtype path Skulk takes
(`--baseline-as-stored` keeps the stored one). On a GPU both serve what is stored (Skulk's
runner may still choose bf16 for a quantized model: `runner.quantized`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SIZES = ("tiny", "100m", "smollm2", "8b", "8b-4bit")
QUANTIZE = ("import sys; from mlx_lm import convert; "
            "convert(sys.argv[1], mlx_path=sys.argv[2], quantize=True, q_bits=4, q_group_size=64)")
STREAM_GENERATE = r"""
import json, sys, time
from skulk.services.runner.blas import preload_blas; preload_blas()
import mlx.core as mx; from mlx_lm import load, stream_generate; from mlx_lm.sample_utils import make_sampler
model_dir, n, runs, prompt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
model, tok = load(model_dir)
if mx.default_device() == mx.cpu:
    model.set_dtype(mx.float32)  # as Skulk's CPU runner (a GPU runs what is stored)
ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
rates = []
for _ in range(runs + 1):  # the first run warms up
    stamps = [time.perf_counter() for _ in stream_generate(model, tok, ids, max_tokens=n,
                                                           sampler=make_sampler(temp=0.0))]
    rates.append((len(stamps) - 1) / (stamps[-1] - stamps[0]))
print(json.dumps(rates[1:]))
"""
"""In-process mlx-lm decode rate of one stream, the single-stream baseline (a fresh process)."""
DEQUANTIZE = ("import sys; from mlx_lm import convert; "
              "convert(sys.argv[1], mlx_path=sys.argv[2], dequantize=sys.argv[3] == '1', dtype=sys.argv[4])")


def build(size: str, root: Path) -> Path:
    """The model directory (`<org>--<name>`) a `--sizes` entry names, made under `root`."""
    if size == "smollm2":
        from skulk.scripts.real_model import build as build_real

        return build_real(root / "real-home")
    if size not in SIZES:
        raise SystemExit(f"unknown size {size!r}: one of {', '.join(SIZES)}")
    from skulk.scripts.demo_model import build as build_demo

    if size == "8b-4bit":
        out = root / "models" / "skulk--demo-8b-4bit"
        if not out.is_dir():
            subprocess.run([sys.executable, "-c", QUANTIZE, str(build_demo(root / "models", size="8b")), str(out)],
                           check=True, capture_output=True, timeout=1800)
        return out
    return build_demo(root / "models", size=size)


def quantized(model_dir: Path) -> bool:
    config = json.loads((model_dir / "config.json").read_text())
    return bool(config.get("quantization") or config.get("quantization_config"))


def baseline_dir(model_dir: Path, root: Path, as_stored: bool = False) -> Path:
    """`model_dir` itself, or (quantized, on the CPU) an fp32 dequantized copy of the same name
    (mlx-lm's converter casts before it dequantizes: two passes, the second to fp32)."""
    import os

    from skulk.wire.accelerator import gather

    if as_stored or not quantized(model_dir) or gather(forced=os.environ.get("SKULK_ACCEL", "")).kind != "cpu":
        return model_dir
    half = root / "dequantized" / model_dir.name
    out = root / "baseline-fp32" / model_dir.name
    for src, dst, deq in ((model_dir, half, "1"), (half, out, "0")):
        dst.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-c", DEQUANTIZE, str(src), str(dst), deq, "float32"], check=True,
                       capture_output=True, timeout=600)
    return out


def node_config(base: Path | None, root: Path, max_batch: int | None, prefill_chunk: int | None,
                engine: str | None = None, name: str = "bench-skulk.yaml") -> Path | None:
    """The node's skulk.yaml: `base` with `runner.max_batch` / `prefill_chunk` / `engine` set where
    given (a GPU run batches 32 to 64 streams with 2048-token prefill chunks; the defaults suit a CPU)."""
    if max_batch is None and prefill_chunk is None and engine is None:
        return base
    import yaml

    config = (yaml.safe_load(base.read_text()) or {}) if base is not None else {}
    runner = config.setdefault("runner", {})
    if max_batch is not None:
        runner["max_batch"] = max_batch
        runner["queue_max"] = max(runner.get("queue_max", 64), 2 * max_batch)
    if prefill_chunk is not None:
        runner["prefill_chunk"] = prefill_chunk
    if engine is not None:
        runner["engine"] = engine
    out = root / name
    out.write_text(yaml.safe_dump(config))
    return out
