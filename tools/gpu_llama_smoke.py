"""Which part of a runner's start breaks llama.cpp on a GPU: one variant per process.

    python -m tools.gpu_llama_smoke VARIANT MODEL_DIR     (run by tools/gpu_llama_cpp.sh)

A node's llama.cpp runner died of SIGSEGV in `llama_model_load_from_file` on an H200 while the
binding alone, in a fresh process, loaded and ran the same file. A runner differs from that fresh
process in four ways; each variant adds one, and prints `VARIANT ok` when the model loads and
answers (a crash shows as the shell's exit status):

- `binding`: the binding's own `Llama` (every layer offloaded, `n_gpu_layers=-1`);
- `ours`: the runner's `load_model` (`n_gpu_layers` 2**30) and a context;
- `torch`: `import torch, transformers` first (the tokenizer's import may load torch's CUDA libraries);
- `standby`: OpenBLAS preloaded globally and mlx, mlx-lm imported first, as a standby runner does;
- `runner`: what the runner does, in its order: the GPU probe, the tokenizer, then the model;
- `fork`: the standby's imports, then a fork, then `runner` in the child (a standby runner is forked
  from the node's zygote before it imports);
- `engine`: the runner's `LlamaCppEngine.load()`, in a fresh process.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any


def standby_imports() -> None:
    from skulk.services.runner.blas import preload_blas
    from skulk.supervisor.tree import RUNNER_STACK

    preload_blas()
    for module in RUNNER_STACK:
        __import__(module)


def load_ours(model_dir: Path) -> None:
    import llama_cpp

    from skulk.services.runner.llamacpp.model_file import gguf_of, load_model

    model = load_model(llama_cpp, gguf_of(model_dir), gpu=True)
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = 512
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    assert ctx, "no context"


def runner_order(model_dir: Path) -> None:
    import llama_cpp
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    print("GPU offload:", bool(llama_cpp.llama_supports_gpu_offload()))
    load_tokenizer(model_dir)
    load_ours(model_dir)


def run(variant: str, model_dir: Path) -> None:
    if variant == "binding":
        import llama_cpp

        llm = llama_cpp.Llama(str(model_dir / "model.gguf"), n_gpu_layers=-1, n_ctx=512, verbose=False)
        out: Any = llm("The capital of France is", max_tokens=8, temperature=0)
        print(repr(out["choices"][0]["text"]))
    elif variant == "ours":
        load_ours(model_dir)
    elif variant == "torch":
        import torch  # noqa: F401
        import transformers  # noqa: F401

        load_ours(model_dir)
    elif variant == "standby":
        standby_imports()
        load_ours(model_dir)
    elif variant == "runner":
        runner_order(model_dir)
    elif variant == "fork":
        standby_imports()
        pid = os.fork()
        if pid == 0:
            runner_order(model_dir)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            raise SystemExit(f"forked child ended with status {status:#x} (signal {status & 0x7f})")
    elif variant == "engine":
        from skulk.services.runner.llamacpp.engine import LlamaCppEngine

        engine = LlamaCppEngine(model_dir, max_batch=4, prefill_chunk=256, prefix_cache_bytes=0, kv_tokens=2048)
        engine.load()
        print(engine.path)
    else:
        raise SystemExit(f"unknown variant {variant}")


VARIANTS = ("binding", "ours", "torch", "standby", "runner", "fork", "engine")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("variant", choices=VARIANTS)
    p.add_argument("model_dir", type=Path, help="a model directory holding model.gguf")
    ns = p.parse_args()
    t = time.monotonic()
    run(ns.variant, ns.model_dir)
    print(f"{ns.variant} ok in {time.monotonic() - t:.1f}s", flush=True)


if __name__ == "__main__":
    main()
