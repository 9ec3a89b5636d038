"""The MLX engine: mlx-lm's `BatchGenerator` for continuous batching and its `LRUPromptCache`
for prefix reuse, on the whole model or on this rank's shard.

Requests join and leave the running batch between any two steps; each `step()` is one decode
step for the batch plus one prefill chunk: `prefill_chunk` prompt tokens per step in all, shared
by the requests still prefilling (`scheduler.prefill_share`). A step's work stays bounded
however many prompts arrive at once, so running streams keep flowing and the loop beats its
heartbeat every step (mlx-lm's own per-request chunk let 8 prompts of 1,000 tokens make one
7.8 s step on the ~100M model; the runner was killed for missed heartbeats). The prefill rate
hardly depends on the slice: 8 prompts of 128 tokens prefilled at 606 tok/s in 32-token slices
and 703 tok/s in one go. A finished
request's KV cache is kept under its tokens (prompt + output) and reused by a later prompt
that shares a prefix; the cache is bounded in bytes on rank 0, and the other ranks evict to
rank 0's entry count (`trim_cache`), so all ranks hold the same entries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from skulk.cluster.state import TaskParams
from skulk.services.runner import blas, cpu_linear, cpu_ops, cpu_rope, drafter, sampling, speculate, warmup
from skulk.services.runner.core_share import CoreShare
from skulk.services.runner.engine import Detokenizer, OutputFormat, PromptProgress, StepOutput, TokenOut, output_of
from skulk.services.runner.prompt import template_inputs
from skulk.services.runner.quant_path import QuantMode
from skulk.services.runner.ring import Ring, load_model
from skulk.services.runner.scheduler import prefill_share
from skulk.services.runner.speculate import SpecMode, SpecSettings
from skulk.wire.inference import RankInsert

log = logging.getLogger("skulk.runner")

CACHE_KEY = "model"  # LRUPromptCache keys entries by (model, tokens); a runner has one model
MIN_REUSE = 8
"""A shorter shared prefix (a chat template's first tokens) is prefilled again: copying a
cached entry would cost more than it saves."""
UNBOUNDED = 1 << 62
DEFAULT_SPEC = SpecSettings()  # frozen: one shared default is safe


class MlxBatchEngine:
    def __init__(self, model_dir: Path, ring: Ring | None, max_batch: int, prefill_chunk: int,
                 prefix_cache_bytes: int, quant_mode: QuantMode = QuantMode.AUTO,
                 spec: SpecSettings = DEFAULT_SPEC) -> None:
        self.model_dir, self.ring, self.quant_mode = model_dir, ring, quant_mode
        # sharded instances do not speculate (every rank would have to agree on each proposal)
        self.spec = spec if ring is None else SpecSettings()
        self.speculation = ("" if spec.mode is SpecMode.OFF else
                            f"{spec.mode.value} x{spec.num_draft_tokens}, up to {spec.max_streams} stream"
                            if ring is None else
                            f"off: a sharded instance does not speculate ({spec.mode.value} asked)")
        self.spec_rows: dict[int, bool] = {}  # rows that may speculate (no grammar): uid -> greedy
        self.max_batch, self.prefill_chunk = max_batch, prefill_chunk
        # Rank 0 bounds the cache in bytes; the other ranks follow its entry count.
        self.cache_bytes = prefix_cache_bytes if ring is None or ring.rank == 0 else UNBOUNDED
        self.path = "unknown"
        self.model_context = 0
        self.max_token_bytes = 1
        self.kv_capacity = 0  # mlx-lm's KV caches grow with the rows: no fixed size
        self.model: Any = None
        self.tokenizer: Any = None
        self._format: OutputFormat | None = None
        self.gen: Any = None
        self.prefix: Any = None
        self.joined = 0  # requests inserted since the last step
        self.drafter: Any = None
        self.share: CoreShare | None = None  # on the CPU, one node's whole model: OpenBLAS's threads shared
        self.stepping_threads = 0

    # ---- boot ------------------------------------------------------------------------------
    def load(self) -> None:
        from mlx_lm.generate import BatchGenerator
        from mlx_lm.models.cache import LRUPromptCache

        self.model, self.tokenizer, self.path = load_model(self.model_dir, self.ring, self.max_batch, self.quant_mode)
        self.share = cpu_share(self.ring)
        if self.share is not None:
            self.stepping_threads = self.share.threads
            self.path += ", BLAS threads shared with the runners stepping at once on this machine"
        if self.spec.mode is SpecMode.DRAFTER:
            self._load_drafter()
        model = self.model
        if cpu_ops.install():
            self.path += ", fast CPU attention, SwiGLU and RoPE"
            model = cpu_rope.SharingModel(self.model)  # one set of rotary angles per forward pass
            matmuls = cpu_linear.install(self.model, self.max_batch, sharded=self.ring is not None).line()
            log.info("%s", matmuls)
            self.path += "; " + matmuls
        args = getattr(self.model, "args", None)
        self.model_context = int(getattr(args, "max_position_embeddings", 0) or 0)
        vocab = self.tokenizer.get_vocab()
        self.vocab_size = int(getattr(args, "vocab_size", 0) or len(vocab))  # the logits' width
        self.max_token_bytes = max((len(piece.encode()) for piece in vocab), default=1)
        eos = sorted(self.tokenizer.eos_token_ids)
        self.gen = BatchGenerator(model, stop_tokens=[[t] for t in eos],
                                  sampler=sampling.greedy(),
                                  completion_batch_size=self.max_batch,
                                  prefill_batch_size=self.max_batch,
                                  prefill_step_size=self.prefill_chunk)
        self.prefix = LRUPromptCache(max_size=UNBOUNDED, max_bytes=self.cache_bytes) \
            if self.cache_bytes > 0 else None

    def _load_drafter(self) -> None:
        """The drafter beside the model, in the same dtype path; without one, no speculation
        (and the runner says why in `/state`)."""
        where, why = drafter.locate(self.model_dir, self.spec.drafter)
        if where is not None:
            draft_model, _tok, _path = load_model(where, None)
            theirs = getattr(getattr(draft_model, "args", None), "vocab_size", None)
            ours = getattr(getattr(self.model, "args", None), "vocab_size", None)
            if theirs == ours:
                self.drafter = drafter.Drafter(draft_model)
                self.speculation += f" (drafter {where.name.replace('--', '/', 1)})"
                return
            why = f"off: drafter {where.name} has a vocabulary of {theirs}, the model {ours}"
        log.warning("no speculation: %s", why.removeprefix("off: "))
        self.spec, self.speculation = SpecSettings(), why

    def warmup(self) -> None:
        """The step shapes serving forms (`warmup.py`), every rank alike, then an empty cache."""
        import mlx.core as mx

        gpu = mx.default_device() != mx.cpu
        grammar = json_object_grammar() if gpu else ""
        rounds = warmup.plan(self.max_batch, self.prefill_chunk, gpu)
        took = warmup.run(rounds, self.insert, self.step, self.active, self.next_uid, self.vocab_size, grammar)
        # (a GPU whose llguidance cannot make the grammar warms the constrained round unconstrained)
        self.trim_cache(0)
        log.info("warm-up: %s in %.2fs", ", ".join(r.what for r in rounds), took)

    # ---- requests --------------------------------------------------------------------------
    def encode(self, params: TaskParams) -> list[int]:
        if params.prompt:
            return list(self.tokenizer.encode(params.prompt))
        messages, kwargs = template_inputs(params)
        return list(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, **kwargs))

    def output_format(self) -> OutputFormat:
        if self._format is None:  # read once from the tokenizer (every request asks)
            self._format = self._read_format()
        return self._format

    def _read_format(self) -> OutputFormat:
        tok = self.tokenizer
        return OutputFormat(think=(tok.think_start, tok.think_end) if tok.has_thinking else None,
                            think_start_ids=tuple(tok.think_start_tokens or ()),
                            tools=(tok.tool_call_start, tok.tool_call_end) if tok.has_tool_calling else None,
                            parse_tool=tok.tool_parser)

    def next_uid(self) -> int:
        return int(self.gen._uid_count)  # noqa: SLF001 - BatchGenerator numbers inserts sequentially

    def insert(self, inserts: Sequence[RankInsert]) -> list[int]:
        if not inserts:
            return []
        rests, caches, prefixes, cached = [], [], [], []
        for ins in inserts:
            prompt = list(ins.prompt)
            cache, rest = self._fetch(prompt)
            rests.append(rest)
            caches.append(cache)
            prefixes.append(prompt[:len(prompt) - len(rest)])
            cached.append(len(prompt) - len(rest))
        uids = self.gen.insert(rests, max_tokens=[i.max_tokens for i in inserts], caches=caches,
                               all_tokens=prefixes,
                               samplers=[sampling.make(i.temperature, i.top_p, i.top_k, i.min_p, i.seed)
                                         for i in inserts],
                               logits_processors=[self._processors(i.grammar, output_of(i)) for i in inserts])
        self.joined += len(inserts)
        self.spec_rows.update({i.uid: i.temperature <= 0.0 for i in inserts if not i.grammar})
        if list(uids) != [i.uid for i in inserts]:
            raise RuntimeError(f"batch uids {uids} differ from the plan's {[i.uid for i in inserts]}")
        return cached

    def _processors(self, grammar: str, already: Sequence[int] = ()) -> list[Any]:
        """A constrained request's grammar processor (none for the others: they cost nothing);
        `already`: the output a resumed answer has."""
        if not grammar:
            return []
        from skulk.services.runner.grammar import GrammarProcessor

        return [GrammarProcessor(self.tokenizer._tokenizer, self.vocab_size,  # noqa: SLF001
                                 sorted(self.tokenizer.eos_token_ids), grammar, already)]

    def _fetch(self, prompt: list[int]) -> tuple[Any, list[int]]:
        """The nearest cached prefix of `prompt` (a copy) and the tokens still to prefill (never
        none: the last prompt token is what starts decoding)."""
        if self.prefix is None:
            return None, prompt
        from mlx_lm.models.cache import trim_prompt_cache

        cache, rest = self.prefix.fetch_nearest_cache(CACHE_KEY, prompt)
        if cache is None or len(prompt) - len(rest) < MIN_REUSE:
            return None, prompt
        if not rest:  # the whole prompt is cached: feed its last token again
            if trim_prompt_cache(cache, 1) != 1:  # a cache that cannot trim (state-space layers)
                return None, prompt
            rest = prompt[-1:]
        return cache, list(rest)

    def remove(self, uids: Sequence[int]) -> None:
        if uids:
            self.gen.remove(list(uids))
            for uid in uids:
                self.spec_rows.pop(uid, None)
        if self.share is not None and not self.active():
            self.share.idle()

    def step(self) -> StepOutput:
        gen = self.gen
        if self.share is not None and self.active():  # (a step with nothing to run asks for no share)
            self.stepping_threads = self.share.step_with(time.monotonic(), self.stepping_threads, self._set_threads)
        try:
            return self._step(gen)
        finally:
            if self.share is not None and not self.active():
                self.share.idle()  # nothing left to step: the cores are the other runners'

    def _set_threads(self, n: int) -> None:
        """OpenBLAS's one global thread count, set while no matmul runs: mlx-lm computes the next
        step on its generation stream while the runner reads the last, so that stream is waited for
        first (only when the share changes: other runners start or stop stepping). The row blocks'
        second stream (`cpu_linear`) feeds that stream, so its work is done by then too."""
        import mlx.core as mx

        mx.synchronize(self.gen.stream)
        blas.set_threads(n)
        log.debug("stepping with %d BLAS threads (%d runners stepping on this machine)", n,
                  self.share.busy_runners if self.share else 1)

    def _step(self, gen: Any) -> StepOutput:
        if (self.spec.mode is not SpecMode.OFF
                and (spec := speculate.step(gen, self.spec, self.spec_rows, self.drafter)) is not None):
            for e in spec:
                if e.finish is not None:
                    self._row_ended(e.uid, e.all_tokens, e.prompt_cache)
            return StepOutput([], [TokenOut(e.uid, e.token, e.logprobs, e.finish, e.accepted, e.rejected)
                                   for e in spec])
        prefilling = len(gen._prompt_batch) + min(len(gen._unprocessed_sequences), self.max_batch)  # noqa: SLF001
        gen.prefill_step_size = prefill_share(self.prefill_chunk, prefilling, self.joined)
        self.joined = 0
        prompt_responses, generation_responses = gen.next()
        prompts = [PromptProgress(r.uid, r.progress[0], r.progress[1]) for r in prompt_responses]
        tokens = []
        for r in generation_responses:
            tokens.append(TokenOut(r.uid, int(r.token), r.logprobs, r.finish_reason))
            if r.finish_reason is not None:
                self._row_ended(r.uid, r.all_tokens, r.prompt_cache)
        return StepOutput(prompts, tokens)

    def _row_ended(self, uid: int, all_tokens: list[int] | None, cache: Any) -> None:
        """A row the engine ended (length, EOS, a stop sequence): its cache goes to the prefix cache."""
        self.spec_rows.pop(uid, None)
        if self.prefix is not None and cache is not None:
            self.prefix.insert_cache(CACHE_KEY, list(all_tokens or ()), cache)

    def active(self) -> int:
        gen = self.gen
        return len(gen._unprocessed_sequences) + len(gen._prompt_batch) + len(gen._generation_batch)  # noqa: SLF001

    # ---- prefix cache ----------------------------------------------------------------------
    def cache_entries(self) -> int:
        return len(self.prefix) if self.prefix is not None else 0

    def trim_cache(self, entries: int) -> None:
        if self.prefix is not None and len(self.prefix) > entries:
            self.prefix.trim_to(n_sequences=entries)

    # ---- text ------------------------------------------------------------------------------
    def detokenizer(self) -> Detokenizer:
        return self.tokenizer.detokenizer  # a fresh copy per access

    def piece(self, token: int) -> str:
        return str(self.tokenizer.decode([token]))

    def logprob_of(self, logprobs: Any, token: int, k: int) -> tuple[float, list[tuple[int, float]]]:
        import mlx.core as mx

        top: list[tuple[int, float]] = []
        k = min(k, logprobs.shape[-1])
        if k > 0:
            ids = cast(list[int], mx.argpartition(-logprobs, kth=k - 1)[:k].tolist())  # a 1-D array of ids
            values = cast(list[float], logprobs[mx.array(ids)].tolist())  # their log-probabilities, 1-D
            top = sorted(zip(ids, values), key=lambda p: -p[1])
        return float(logprobs[token].item()), top

    def peak_memory(self) -> int:
        import mlx.core as mx

        return int(mx.get_peak_memory())


def json_object_grammar() -> str:
    """The grammar of `response_format: json_object`, for warming the constrained path ("" when
    llguidance cannot make it: that path is then left cold, not the runner failed)."""
    try:
        from skulk.node.json_grammar import json_schema_grammar

        return json_schema_grammar({"type": "object"})  # what `response_format: json_object` asks
    except Exception:  # noqa: BLE001 - a warm-up aid, never a reason to fail a boot
        return ""


def cpu_share(ring: Ring | None) -> CoreShare | None:
    """On the CPU, a one-node model whose OpenBLAS the runner preloaded: its BLAS threads are every
    core while it steps alone and a share while other runners of this machine step too
    (`core_share.py`; OpenBLAS's threads spin while they wait, so two runners each with a thread
    per core take turns badly). `OPENBLAS_NUM_THREADS` caps it. A sharded rank sets its own
    threads (`ring.py`)."""
    import mlx.core as mx

    if ring is not None or mx.default_device() != mx.cpu or not blas.preloaded():
        return None
    return CoreShare(blas.usable_cores(), cpu_linear.blas_threads())
