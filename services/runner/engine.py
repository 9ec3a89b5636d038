"""The MLX engine of one runner: load through mlx-lm, warm up, and step generations.

`mlx` is imported only inside these functions, after `preload_blas()`: on Linux, loading
Debian's OpenBLAS before mlx and running in fp32 is the CPU fast path (see
docs/operations.md); the runner logs which path it took.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skulk.services.runner.stops import StopMatcher
from skulk.wire.inference import Done, TokenChunk, TopLogprob
from skulk.wire.state import TaskParams

log = logging.getLogger("skulk.runner")

OPENBLAS_PATHS = ("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
                  "/usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3")
PREFILL_STEP = 512
"""Prefill chunk size: each chunk ends with a heartbeat, so long prompts do not look dead."""


def preload_blas() -> str | None:
    """Load OpenBLAS globally before mlx is imported (Linux CPU fast path)."""
    if not sys.platform.startswith("linux") or "mlx.core" in sys.modules:
        return None
    for path in OPENBLAS_PATHS:
        if Path(path).exists():
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return path
            except OSError as exc:
                log.warning("could not preload %s: %s", path, exc)
    return None


@dataclass
class Session:
    """One generation in progress: `step()` advances it by one token."""

    request_id: str
    params: TaskParams
    prompt_tokens: int
    stream: Any
    tokenizer: Any
    stops: StopMatcher
    seq: int = 0
    completion_tokens: int = 0
    last: Any = None
    done: bool = False
    started: float = field(default_factory=time.monotonic)

    def step(self) -> list[TokenChunk | Done]:
        """The next messages for the client; the last one of a session is a Done."""
        try:
            resp = next(self.stream)
        except StopIteration:
            return self._finish("stop")
        self.last = resp
        self.completion_tokens = resp.generation_tokens
        out: list[TokenChunk | Done] = []
        text, hit = self.stops.feed(resp.text)
        if resp.finish_reason is not None and not hit:
            text += self.stops.flush()
        if text or not hit:
            out.append(self._chunk(resp, text))
        if hit:
            out.extend(self._finish("stop"))
        elif resp.finish_reason is not None:
            out.extend(self._finish(resp.finish_reason))
        return out

    def _chunk(self, resp: Any, text: str) -> TokenChunk:
        chunk = TokenChunk(request_id=self.request_id, seq=self.seq, text=text,
                           token=int(resp.token), **self._logprobs(resp))
        self.seq += 1
        return chunk

    def _logprobs(self, resp: Any) -> dict[str, Any]:
        if not self.params.logprobs:
            return {}
        import mlx.core as mx

        lp = resp.logprobs
        token = int(resp.token)
        top: list[TopLogprob] = []
        k = min(self.params.top_logprobs, lp.shape[-1])
        if k > 0:
            ids = mx.argpartition(-lp, kth=k - 1)[:k]
            for i in sorted(ids.tolist(), key=lambda j: -lp[j].item()):
                piece = self.tokenizer.decode([i])
                top.append(TopLogprob(token=piece, logprob=lp[i].item(), token_bytes=piece.encode()))
        piece = self.tokenizer.decode([token])
        return {"logprob": lp[token].item(), "token_bytes": piece.encode(), "top_logprobs": tuple(top)}

    def _finish(self, reason: str) -> list[TokenChunk | Done]:
        self.done = True
        self.stream.close()
        resp = self.last
        return [Done(request_id=self.request_id, seq=self.seq, finish_reason=reason,
                     prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens,
                     prompt_tps=float(getattr(resp, "prompt_tps", 0.0) or 0.0),
                     generation_tps=float(getattr(resp, "generation_tps", 0.0) or 0.0),
                     peak_memory_bytes=int((getattr(resp, "peak_memory", 0.0) or 0.0) * 1e9))]


@dataclass(frozen=True, slots=True)
class Ring:
    """This runner's place in an mx.distributed ring (from the placement)."""

    rank: int
    hosts: tuple[str, ...]
    sharding: str  # "Pipeline" | "Tensor"
    split: tuple[int, ...]  # layers per rank (Pipeline)
    hostfile: Path
    connect_deadline_s: float = 120.0


def connect_group(ring: Ring) -> Any:
    """`mx.distributed.init(backend="ring")` under SKULK_GROUP_CONNECT_DEADLINE_SECONDS.

    The call blocks in C until every rank has connected; a watchdog thread is the only way
    to bound it, and on overrun it logs a CRITICAL diagnosis and exits the process (the
    supervisor then reports the runner failed).
    """
    import mlx.core as mx

    host, _, port = ring.hosts[ring.rank].rpartition(":")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:  # fail now, not at the deadline: the leader re-creates the instance on new ports
            probe.bind((host, int(port)))
        except OSError as exc:
            raise RuntimeError(f"ring port {host}:{port} of rank {ring.rank} is taken ({exc.strerror})") from None
    ring.hostfile.write_text(json.dumps([[h] for h in ring.hosts]))
    os.environ["MLX_HOSTFILE"] = str(ring.hostfile)
    os.environ["MLX_RANK"] = str(ring.rank)

    with Deadline(ring.connect_deadline_s, f"rank {ring.rank} forming its mx.distributed ring with "
                  f"{', '.join(ring.hosts)} (SKULK_GROUP_CONNECT_DEADLINE_SECONDS)",
                  "a peer rank is down, or its port is unreachable or taken: check the peers' "
                  "runner logs and firewalls", GROUP_CONNECT_EXIT):
        return mx.distributed.init(backend="ring", strict=True)


GROUP_CONNECT_EXIT = 87  # exitcodes.GROUP_CONNECT_FAILED
WEDGED_EXIT = 86  # exitcodes.WEDGED


class Deadline:
    """A hard deadline around a call that may block in C forever (a faulted Metal eval parks
    at 0% CPU, uninterruptible from Python): on overrun, a CRITICAL diagnosis and exit."""

    def __init__(self, seconds: float, what: str, guidance: str, code: int,
                 before_exit: Callable[[str], None] | None = None) -> None:
        self.seconds, self.what, self.guidance, self.code = seconds, what, guidance, code
        self.before_exit = before_exit
        self._timer = threading.Timer(seconds, self._overrun)
        self._timer.daemon = True

    def _overrun(self) -> None:
        message = f"{self.what} exceeded its {self.seconds:.0f}s deadline — {self.guidance}"
        log.critical(message)
        if self.before_exit is not None:
            try:
                self.before_exit(message)
            except Exception:  # noqa: BLE001 - the exit below must happen whatever this does
                pass
        logging.shutdown()
        os._exit(self.code)

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


class MlxEngine:
    def __init__(self, model_dir: Path, ring: Ring | None = None) -> None:
        self.model_dir = model_dir
        self.ring = ring
        self.model: Any = None
        self.tokenizer: Any = None
        self.path = "unknown"

    def load(self) -> None:
        if self.ring is not None and len(self.ring.hosts) > 1:
            self._load_sharded(self.ring)
            return
        import mlx.core as mx
        from mlx_lm import load
        from mlx_lm.utils import dequantize_model

        model, tokenizer, config = load(str(self.model_dir), return_config=True)
        if mx.default_device() == mx.cpu:
            # Quantized matmuls are very slow on CPU: dequantize and run fp32 (4 B/param).
            if config.get("quantization") or config.get("quantization_config"):
                model = dequantize_model(model)
            model.set_dtype(mx.float32)
            self.path = "cpu fp32"
        else:
            self.path = f"{mx.default_device()}"
        mx.eval(model.parameters())
        self.model, self.tokenizer = model, tokenizer

    def _load_sharded(self, ring: Ring) -> None:
        """mlx-lm's sharded load for a local directory, with the placement's layer split."""
        import mlx.core as mx
        from mlx_lm.utils import load_model, load_tokenizer

        group = connect_group(ring)
        model, config = load_model(self.model_dir, lazy=True, strict=False)
        tokenizer = load_tokenizer(self.model_dir, {"trust_remote_code": True},
                                   eos_token_ids=config.get("eos_token_id"))
        if ring.sharding == "Tensor":
            model.shard(group)
        else:
            model.model.pipeline(group, split=list(ring.split))
        if mx.default_device() == mx.cpu:
            model.set_dtype(mx.float32)
        mx.eval(model.parameters())
        mx.eval(mx.distributed.all_sum(mx.array(1.0), stream=mx.cpu))  # every rank loaded
        self.path = f"{ring.sharding} rank {ring.rank}/{len(ring.hosts)} " + (
            "cpu fp32" if mx.default_device() == mx.cpu else str(mx.default_device()))
        self.model, self.tokenizer = model, tokenizer

    def warmup(self) -> None:
        session = self.start("warmup", TaskParams(model="", messages=(), max_tokens=4,
                                                  temperature=0.0), lambda *_: None,
                             prompt=[0, 1, 2, 3])
        while not session.done:
            session.step()

    def prompt_ids(self, params: TaskParams) -> list[int]:
        messages = [{"role": m.role, "content": m.content} for m in params.messages]
        return list(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True))

    def start(self, request_id: str, params: TaskParams,
              on_prefill: Callable[[int, int], None], prompt: list[int] | None = None) -> Session:
        import mlx.core as mx
        from mlx_lm import stream_generate
        from mlx_lm.sample_utils import make_sampler

        ids = prompt if prompt is not None else self.prompt_ids(params)
        if params.seed is not None:
            mx.random.seed(params.seed)
        temp = 1.0 if params.temperature is None else params.temperature
        top_p = params.top_p if params.top_p is not None and params.top_p < 1.0 else 0.0
        sampler = make_sampler(temp=temp, top_p=top_p, min_p=params.min_p or 0.0,
                               top_k=params.top_k or 0)
        stream = stream_generate(self.model, self.tokenizer, ids, max_tokens=params.max_tokens,
                                 sampler=sampler, prefill_step_size=PREFILL_STEP,
                                 prompt_progress_callback=on_prefill)
        return Session(request_id, params, len(ids), stream, self.tokenizer,
                       StopMatcher(params.stop))

