"""An embedding GGUF on llama.cpp: the `EmbedModel` of an embedding runner whose engine is llama.cpp.

The runner's `Embedder` (`embed_engine.py`) queues, admits and groups the inputs as for MLX; this
engine runs one group in one `llama_decode`: each input its own sequence of one context made with
`embeddings` on and the directory's pooling (sentence-transformers' `1_Pooling`, which the GGUF
import writes from the file's `pooling_type`), then reads each sequence's pooled vector and
L2-normalises it (after keeping the first `dimensions` components, as OpenAI's `dimensions`
does). Inputs are tokenized by llama.cpp itself, as its own `embed` does, so a vector is the one
llama.cpp gives for the text on the same file (up to float rounding of a different batch).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from skulk.services.runner.core_share import CoreShare
from skulk.services.runner.embed_engine import INPUTS_PER_STEP, Pooling, pooling_of, to_bytes
from skulk.services.runner.llamacpp.batch import Batch
from skulk.services.runner.llamacpp.model_file import LlamaLoadError, gguf_of, load_model, threads
from skulk.services.runner.llamacpp.text import Vocab

CONTEXT = 8192
"""Tokens one step's group may hold at most (an input longer than the model's own context, or
than this, is refused at admission); `cluster.engines.LLAMA_EMBED_TOKENS` counts it."""
LOGITS_BUDGET = 512 << 20
"""llama.cpp computes a causal model's logits for every token of the micro-batch even when only
pooled embeddings are read (a float per vocabulary entry per token: 1.6 GiB of compute buffer
for 8192 tokens of a 49k vocabulary), and pooling needs each input whole in one micro-batch: the
context is cut so that this buffer stays within this budget (never under `MIN_CONTEXT`)."""
MIN_CONTEXT = 512
PAD = 256
"""llama.cpp pads its context to a multiple of 256 tokens, and a micro-batch of another size than
the padded context fails an assertion in its attention (seen with 2730): the cap is a multiple."""
POOLING_TYPE = {Pooling.MEAN: 1, Pooling.CLS: 2, Pooling.LAST: 3}  # llama.cpp's llama_pooling_type


class LlamaEmbedEngine:
    """The model and one embedding context (the runner's `Embedder` drives it)."""

    def __init__(self, model_dir: Path, n_threads: int = 0) -> None:
        self.model_dir = model_dir
        self.n_threads = n_threads or threads()
        # every core while this runner embeds alone, a share while others step too (core_share.py)
        self.share: CoreShare | None = CoreShare(threads(), n_threads)
        self.stepping_threads = self.n_threads
        self.pooling = pooling_of(model_dir)
        self.path = "llama.cpp"
        self.model_context = 0
        self.width = 0
        self.max_token_bytes = 1

    def load(self) -> None:
        import llama_cpp

        self.lib: Any = llama_cpp
        gguf = gguf_of(self.model_dir)
        gpu = bool(llama_cpp.llama_supports_gpu_offload())
        self.model = load_model(llama_cpp, gguf, gpu)
        self.vocab = Vocab(llama_cpp.llama_model_get_vocab(self.model))
        trained = int(llama_cpp.llama_model_n_ctx_train(self.model))
        context = context_for(trained, self.vocab.size)
        cparams = llama_cpp.llama_context_default_params()
        # one batch and one micro-batch for the whole group: a model whose attention is not causal
        # (BERT's) must see every token of an input in one micro-batch
        cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = context
        cparams.n_seq_max = INPUTS_PER_STEP
        cparams.kv_unified = True
        cparams.embeddings = True
        cparams.pooling_type = POOLING_TYPE[self.pooling]
        cparams.n_threads = cparams.n_threads_batch = self.n_threads
        cparams.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise LlamaLoadError(f"llama.cpp cannot make an embedding context of {context} tokens for {gguf.name}")
        self.model_context = context  # (llama.cpp's own n_ctx is padded to a multiple of 256)
        self.width = int(llama_cpp.llama_model_n_embd(self.model))
        self.batch = Batch(self.model_context)
        if gpu:
            self.share = None  # the GPU computes; the threads only feed it
        shared = ", shared with the runners stepping at once on this machine" if self.share else ""
        size = int(llama_cpp.llama_model_size(self.model))
        self.path = (f"llama.cpp {'GPU' if gpu else 'CPU'} {self.n_threads} threads{shared}, {size / 2**20:.0f} MiB "
                     f"weights, {self.pooling} pooling")

    def warmup(self) -> None:
        self.embed([self.encode("warm up") or [0]], 0)

    def active(self) -> int:
        return 0  # no generation batch (the runner's `Batcher` stays empty)

    def encode(self, text: str) -> list[int]:
        return self.vocab.encode(text, add_special=True, parse_special=False)  # as llama.cpp's own embed

    def embed(self, prompts: Sequence[Sequence[int]], dimensions: int) -> list[bytes]:
        """One decode of the group, each input its own sequence; their unit vectors in order."""
        lib = self.lib
        mem = lib.llama_get_memory(self.ctx)
        if mem:  # a model with attention over earlier tokens keeps them: start each group empty
            lib.llama_memory_clear(mem, True)
        self.batch.clear()
        for seq, prompt in enumerate(prompts):  # every token an output: pooling reads them all
            self.batch.add(list(prompt), 0, seq, True, want_all=True)
        try:
            if self.share is not None:
                self.stepping_threads = self.share.step_with(
                    time.monotonic(), self.stepping_threads, lambda n: lib.llama_set_n_threads(self.ctx, n, n))
            rc = lib.llama_decode(self.ctx, self.batch.ready())
        finally:
            if self.share is not None:
                self.share.idle()  # a group is one decode: between groups the cores are the others'
        if rc != 0:
            raise RuntimeError(f"llama_decode of {len(prompts)} inputs failed ({rc})")
        out = []
        for seq in range(len(prompts)):
            pointer = lib.llama_get_embeddings_seq(self.ctx, seq)
            if not pointer:
                raise RuntimeError(f"llama.cpp gave no pooled embedding for input {seq}")
            out.append(to_bytes(unit(np.ctypeslib.as_array(pointer, shape=(self.width,)), dimensions)))
        return out


def context_for(trained: int, vocab: int) -> int:
    """The embedding context: the model's own, at most `CONTEXT`, and no more tokens than keep
    their logits within `LOGITS_BUDGET` (but `MIN_CONTEXT` at least), a multiple of `PAD`."""
    tokens = min(trained if trained > 0 else CONTEXT, CONTEXT, max(MIN_CONTEXT, LOGITS_BUDGET // (4 * max(1, vocab))))
    return tokens // PAD * PAD if tokens >= PAD else tokens


def unit(vector: np.ndarray, dimensions: int = 0) -> np.ndarray:
    """The first `dimensions` components (all: 0), scaled to length 1 (float32)."""
    v = np.array(vector[:dimensions] if 0 < dimensions < len(vector) else vector, dtype=np.float32)
    return v / max(float(np.linalg.norm(v)), 1e-12)
