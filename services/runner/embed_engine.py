"""The runner of an embedding model: `Embed` requests in, unit vectors out (no generation).

A runner whose model's card is an embedding model's (`--embedding 1`, from the card's tasks) serves
`Embed` instead of `Generate`; its model is MLX's (`MlxEmbedEngine`) or llama.cpp's
(`llamacpp/embed.py`), as the instance's engine says. Inputs are tokenized when the request arrives (an empty or
too-long input is refused at once, like a generation's context check); then each loop step runs
one group of consecutive inputs through the transformer body (`model.model`: the last hidden
states, not logits), right-padded into one batch, pools them as the model's sentence-transformers
config says (mean by default), L2-normalises, and answers that group's `Embeddings`. A step's
work is bounded (`TOKENS_PER_STEP` padded tokens), so heartbeats, cancels and new requests are
served between groups however large a request is. Right padding is harmless to decoder models:
the causal mask keeps padding out of every real token's state, and pooling skips it.

`mlx` is imported only inside functions (after the runner preloaded BLAS).
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from skulk.services.runner import cpu_ops
from skulk.services.runner.ring import load_model
from skulk.wire.commands import NOT_EMBEDDING, NOT_GENERATIVE
from skulk.wire.inference import Cancel, Embed, Embeddings, Failed, FailReason, Generate
from skulk.wire.message import Message
from skulk.wire.models import EngineKind

log = logging.getLogger("skulk.runner")

Out = tuple[list[bytes], Message]
TOKENS_PER_STEP = 4096
"""Padded tokens (inputs x the group's longest) one loop step may run."""
INPUTS_PER_STEP = 64


class Pooling(StrEnum):
    """How token states become one vector (sentence-transformers' `1_Pooling/config.json`)."""

    MEAN = "mean"
    LAST = "last"  # decoder embedding models (e.g. Qwen3-Embedding): the last token's state
    CLS = "cls"  # the first token's state


def pooling_of(model_dir: Path) -> Pooling:
    try:
        config = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
    except (OSError, ValueError):
        return Pooling.MEAN
    if config.get("pooling_mode_lasttoken"):
        return Pooling.LAST
    if config.get("pooling_mode_cls_token") and not config.get("pooling_mode_mean_tokens"):
        return Pooling.CLS
    return Pooling.MEAN


def group_size(lengths: Sequence[int], max_inputs: int = INPUTS_PER_STEP,
               budget: int = TOKENS_PER_STEP) -> int:
    """How many of the next inputs run in one step: as many as keep (count x longest) within
    the token budget, at least one."""
    n, longest = 0, 0
    for length in lengths[:max_inputs]:
        if n and max(longest, length) * (n + 1) > budget:
            break
        n, longest = n + 1, max(longest, length)
    return n


def pool(hidden: Any, lengths: Sequence[int], mode: Pooling, dimensions: int = 0) -> Any:
    """[B, L, D] states of right-padded inputs -> [B, D'] unit vectors (float32); `dimensions`
    keeps the first D' components (then normalises again, as OpenAI's `dimensions` does)."""
    import mlx.core as mx

    hidden = hidden.astype(mx.float32)
    n = mx.array(list(lengths))
    if mode is Pooling.LAST:
        pooled = hidden[mx.arange(hidden.shape[0]), n - 1]
    elif mode is Pooling.CLS:
        pooled = hidden[:, 0]
    else:
        mask = (mx.arange(hidden.shape[1])[None, :] < n[:, None]).astype(mx.float32)
        pooled = (hidden * mask[..., None]).sum(axis=1) / n[:, None].astype(mx.float32)
    if 0 < dimensions < pooled.shape[-1]:
        pooled = pooled[:, :dimensions]
    return pooled / mx.maximum(mx.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)


def to_bytes(row: Any) -> bytes:
    """Little-endian float32 (what OpenAI's base64 encoding carries), from a list or an array."""
    import numpy as np

    return np.asarray(row, dtype="<f4").tobytes()


class EmbedModel(Protocol):
    model_context: int
    width: int

    def encode(self, text: str) -> list[int]: ...

    def embed(self, prompts: Sequence[Sequence[int]], dimensions: int) -> list[bytes]: ...


class MlxEmbedEngine:
    """The model and tokenizer of an embedding runner (whole model: embeddings are not sharded)."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self.path = "unknown"
        self.model_context = 0
        self.width = 0
        self.max_token_bytes = 1
        self.pooling = pooling_of(model_dir)
        self.model: Any = None
        self.tokenizer: Any = None

    def load(self) -> None:
        self.model, self.tokenizer, self.path = load_model(self.model_dir, None)
        if cpu_ops.install():
            self.path += ", fast CPU attention, SwiGLU and RoPE"
        self.path += f", {self.pooling} pooling"
        args = getattr(self.model, "args", None)
        self.model_context = int(getattr(args, "max_position_embeddings", 0) or 0)
        self.width = int(getattr(args, "hidden_size", 0) or 0)

    def warmup(self) -> None:
        self.embed([self.encode("warm up") or [0]], 0)

    def active(self) -> int:
        return 0  # no generation batch (the runner's `Batcher` stays empty)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    def embed(self, prompts: Sequence[Sequence[int]], dimensions: int) -> list[bytes]:
        import mlx.core as mx

        longest = max(len(p) for p in prompts)
        ids = mx.array([list(p) + [0] * (longest - len(p)) for p in prompts])
        vectors = pool(self.model.model(ids), [len(p) for p in prompts], self.pooling, dimensions)
        import numpy as np

        return [to_bytes(row) for row in np.array(vectors)]


@dataclass
class Job:
    envelope: list[bytes]
    request_id: str
    prompts: list[list[int]]
    dimensions: int
    done: int = 0  # inputs embedded and answered so far


class Embedder:
    """The embedding runner's queue without sockets: admit or refuse, then one group per step."""

    def __init__(self, engine: EmbedModel, model_id: str, queue_max: int,
                 max_inputs: int = INPUTS_PER_STEP, budget: int = TOKENS_PER_STEP) -> None:
        self.engine, self.model_id, self.queue_max = engine, model_id, queue_max
        self.max_inputs, self.budget = max_inputs, budget
        self.jobs: deque[Job] = deque()

    @property
    def load(self) -> tuple[int, int]:
        """(requests running, waiting) for the runner's load report."""
        return min(1, len(self.jobs)), max(0, len(self.jobs) - 1)

    def answer(self, envelope: list[bytes], msg: Message) -> list[Out]:
        """An `Embed` is queued or refused at once; a `Generate` is refused (wrong model)."""
        def refuse(request_id: str, reason: FailReason, error: str, retryable: bool = False) -> list[Out]:
            return [(envelope, Failed(request_id=request_id, error=error, retryable=retryable, reason=reason))]

        if isinstance(msg, Cancel):
            return self.cancel(msg.request_id)
        if isinstance(msg, Generate):
            return refuse(msg.request_id, FailReason.BAD_REQUEST, NOT_GENERATIVE.format(model=self.model_id))
        if not isinstance(msg, Embed) or any(j.request_id == msg.request_id for j in self.jobs):
            return []
        if len(self.jobs) >= self.queue_max:
            return refuse(msg.request_id, FailReason.BUSY, f"runner busy: {self.queue_max} embedding "
                          "requests waiting; retry shortly", retryable=True)
        if not msg.inputs:
            return refuse(msg.request_id, FailReason.BAD_REQUEST, "no input to embed")
        width = self.engine.width
        if msg.dimensions < 0 or (width and msg.dimensions > width):
            return refuse(msg.request_id, FailReason.BAD_REQUEST,
                          f"dimensions must be between 1 and {width} for {self.model_id}")
        try:
            prompts = [self.engine.encode(text) for text in msg.inputs]
        except Exception as exc:  # noqa: BLE001 - this request's input, not the runner's fault
            return refuse(msg.request_id, FailReason.BAD_REQUEST, f"input could not be tokenized: {exc}")
        limit = self.engine.model_context
        for i, prompt in enumerate(prompts):
            if not prompt:
                return refuse(msg.request_id, FailReason.BAD_REQUEST, f"input {i} is empty after tokenization")
            if limit and len(prompt) > limit:
                return refuse(msg.request_id, FailReason.CONTEXT_LENGTH_EXCEEDED,
                              f"input {i} has {len(prompt)} tokens; {self.model_id} takes at most {limit}")
        self.jobs.append(Job(envelope, msg.request_id, prompts, msg.dimensions))
        return []

    def cancel(self, request_id: str) -> list[Out]:
        job = next((j for j in self.jobs if j.request_id == request_id), None)
        if job is None:
            return []
        self.jobs.remove(job)
        return [(job.envelope, Failed(request_id=request_id, error="Command cancelled.", retryable=False,
                                      reason=FailReason.CANCELLED))]

    def client_gone(self, request_id: str) -> None:
        if self.cancel(request_id):
            log.info("client of %s is gone; embedding dropped", request_id)

    def step(self) -> list[Out] | None:
        """Embed the next group of the oldest request; None when there is nothing to do."""
        if not self.jobs:
            return None
        job = self.jobs[0]
        rest = job.prompts[job.done:]
        context = self.engine.model_context  # llama.cpp runs a group in one micro-batch of at most this
        n = group_size([len(p) for p in rest], self.max_inputs, min(self.budget, context) if context else self.budget)
        start = job.done
        try:
            vectors = self.engine.embed(rest[:n], job.dimensions)
        except Exception as exc:  # noqa: BLE001 - fail this request, keep serving
            log.exception("embedding %s failed", job.request_id)
            self.jobs.popleft()
            return [(job.envelope, Failed(request_id=job.request_id, error=f"{type(exc).__name__}: {exc}",
                                          retryable=False, reason=FailReason.ENGINE_ERROR))]
        job.done += n
        if job.done >= len(job.prompts):
            self.jobs.popleft()
        return [(job.envelope, Embeddings(request_id=job.request_id, start=start, vectors=tuple(vectors),
                                          prompt_tokens=sum(len(p) for p in rest[:n])))]


def for_model(model_dir: Path, model_id: str, queue_max: int, embedding: bool, engine: EngineKind = EngineKind.MLX,
              threads: int = 0) -> Embedder | None:
    """The embedder of an embedding model's runner (its card says so) on the instance's engine;
    None for a text model."""
    if not embedding:
        return None
    if engine is EngineKind.LLAMA_CPP:
        from skulk.services.runner.llamacpp.embed import LlamaEmbedEngine

        return Embedder(LlamaEmbedEngine(model_dir, threads), model_id, queue_max)
    return Embedder(MlxEmbedEngine(model_dir), model_id, queue_max)


def refuse_embed(envelope: list[bytes], msg: Embed, model_id: str) -> list[Out]:
    """A text model's runner answers an `Embed` (the API checks first; this guards a race)."""
    return [(envelope, Failed(request_id=msg.request_id, error=NOT_EMBEDDING.format(model=model_id),
                              retryable=False, reason=FailReason.BAD_REQUEST))]
