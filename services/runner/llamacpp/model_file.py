"""A GGUF model directory's file loaded by llama.cpp, for either of its engines (generation,
`engine.py`; embeddings, `embed.py`): every layer on the GPU where the binding was built with
one, a typed refusal where the file is missing or llama.cpp cannot load it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from skulk.services.runner.engine import EngineRefused
from skulk.wire.models import GGUF_FILE


class LlamaLoadError(EngineRefused):
    """llama.cpp could not load the file (the message says what is wrong)."""


def threads() -> int:
    """llama.cpp's compute threads: one per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS
        return max(1, os.cpu_count() or 1)


def gguf_of(model_dir: Path) -> Path:
    """The directory's GGUF file (LlamaLoadError where it has none)."""
    gguf = model_dir / GGUF_FILE
    if not gguf.is_file():
        raise LlamaLoadError(f"{model_dir.name} has no {GGUF_FILE}: only GGUF checkpoints run on llama.cpp")
    return gguf


def load_model(llama_cpp: Any, gguf: Path, gpu: bool) -> Any:
    """The file's `llama_model` (its calls leave the interpreter free)."""
    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = 1 << 30 if gpu else 0
    model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), mparams)
    if not model:
        raise LlamaLoadError(f"llama.cpp cannot load {gguf.name} of {gguf.parent.name} "
                             "(an architecture or tensor type it lacks, or a damaged file)")
    return model


def kv_token_bytes(model: Any) -> int:
    """Bytes of keys and values one token holds in the cache (f16, every layer)."""
    import llama_cpp

    layers = int(llama_cpp.llama_model_n_layer(model))
    heads = int(llama_cpp.llama_model_n_head(model)) or 1
    kv_heads = int(llama_cpp.llama_model_n_head_kv(model)) or heads
    width = int(llama_cpp.llama_model_n_embd(model)) // heads
    return 2 * layers * kv_heads * width * 2
