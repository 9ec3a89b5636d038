"""The llama.cpp engine: a GGUF checkpoint on llama.cpp's kernels, batched by the runner.

llama.cpp computes; everything around the model's step is the runner's, as with MLX: one
`llama_context` whose unified KV cache holds a sequence per running request (prefix-cache
entries are kept in host memory and restored on a hit: `prefix.py`), and each `step()` is one
`llama_decode` of one batch: the next token of every decoding row plus up to `prefill_chunk`
prompt tokens for the rows still prefilling, oldest first (`scheduler.prefill_in_order`), so
requests join and leave between any two steps and a long prompt goes in by chunks while the
others decode. Tokens are sampled here (`sample.py`; greedy is llama.cpp's own arg-max),
grammars mask logits (`grammar.py`), and the prompt is the chat template's text tokenized by
llama.cpp itself (`text.py`), so a greedy answer is token for token what llama.cpp gives on the
same file. A lone stream may speculate by prompt lookup
(`speculate.py`: drafts verified in one decode).

The weights are the GGUF file as stored (quantized kernels run on the CPU at full speed: no
fp32 copy); where llama.cpp was built with a GPU backend every layer is offloaded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from skulk.cluster.engines import LLAMA_KV_TOKENS
from skulk.cluster.state import TaskParams
from skulk.services.runner import warmup
from skulk.services.runner.core_share import CoreShare
from skulk.services.runner.engine import (
    Detokenizer,
    OutputFormat,
    PromptProgress,
    StepOutput,
    TokenOut,
    output_of,
)
from skulk.services.runner.grammar import GrammarMask
from skulk.services.runner.llamacpp import speculate
from skulk.services.runner.llamacpp.batch import Batch
from skulk.services.runner.llamacpp.kept import KeptPrefixes
from skulk.services.runner.llamacpp.model_file import LlamaLoadError, gguf_of, kv_token_bytes, load_model, threads
from skulk.services.runner.llamacpp.prefix import PrefixCache, Sequences
from skulk.services.runner.llamacpp.sample import Sampler, log_softmax, top_logprobs
from skulk.services.runner.llamacpp.text import Detokenizer as PieceDetokenizer
from skulk.services.runner.llamacpp.text import Vocab
from skulk.services.runner.prompt import template_inputs
from skulk.services.runner.scheduler import prefill_in_order
from skulk.services.runner.speculate import SpecSettings
from skulk.wire.inference import RankInsert

log = logging.getLogger("skulk.runner")

KV_TOKENS = LLAMA_KV_TOKENS
"""Tokens the unified KV cache holds for all running rows together (one request may use all of
them, up to the model's own context); `runner.kv_tokens` makes it smaller. Requests join while
their claims fit (`scheduler.kv_joining`); answers that outgrow it preempt the youngest."""
CACHE_SEQUENCES = 8
"""Prefix-cache entries kept (in host memory); up to as many spare sequence ids beside the rows'."""
MAX_SEQUENCES = 256  # llama.cpp's LLAMA_MAX_SEQ
UBATCH = 512
FLASH_ATTN = 1  # LLAMA_FLASH_ATTN_TYPE_ENABLED: what llama.cpp's own tools pick on a CPU
FLASH_ATTN_GPU = -1  # LLAMA_FLASH_ATTN_TYPE_AUTO: on a GPU llama.cpp asks the backend (a build without its
# flash-attention kernels would run the op on the CPU if it were forced on)
DEFAULT_SPEC = SpecSettings()  # frozen: one shared default is safe


class KvCacheFull(RuntimeError):
    """`llama_decode` found no room for the batch in the KV cache, the prefix cache let go."""


@dataclass
class _Row:
    uid: int
    seq: int
    prompt: list[int]
    max_tokens: int
    sampler: Sampler
    grammar: GrammarMask | None
    done: int  # prompt tokens whose keys and values are in the cache
    output: list[int] = field(default_factory=list)
    spec_misses: int = 0  # speculation: proposals in a row whose every draft was rejected
    spec_wait: int = 0  # plain steps to take before the next proposal (back-off after misses)

    @property
    def decoding(self) -> bool:
        return self.done >= len(self.prompt)


@dataclass(frozen=True, slots=True)
class Logits:
    """One row's logits: llama.cpp's buffer, read-only and read within the step, or a masked copy."""

    values: np.ndarray


class LlamaCppEngine:
    def __init__(self, model_dir: Path, max_batch: int, prefill_chunk: int, prefix_cache_bytes: int,
                 kv_tokens: int = KV_TOKENS, n_threads: int = 0, spec: SpecSettings = DEFAULT_SPEC) -> None:
        self.model_dir, self.max_batch, self.prefill_chunk = model_dir, max_batch, prefill_chunk
        self.prefix_cache_bytes, self.kv_tokens = prefix_cache_bytes, kv_tokens
        self.n_threads = n_threads or threads()
        # every core while this runner steps alone, a share while others step too (core_share.py)
        self.share: CoreShare | None = CoreShare(threads(), n_threads)
        self.stepping_threads = self.n_threads
        self.path = "llama.cpp"
        self.model_context = 0
        self.max_token_bytes = 1
        self.kv_capacity = 0  # the KV cache's tokens once loaded (the batcher admits by it)
        self.vocab_size = 0
        self.spec, self.speculation = speculate.describe(spec)
        self.rows: dict[int, _Row] = {}
        self.uid_count = 0
        self._lltokenizer: Any = None
        self._format: OutputFormat | None = None

    # ---- boot ------------------------------------------------------------------------------
    def load(self) -> None:
        import llama_cpp

        self.lib: Any = llama_cpp  # the binding, once (a step calls it several times)
        gguf = gguf_of(self.model_dir)
        gpu = bool(llama_cpp.llama_supports_gpu_offload())
        if gpu:  # one after the other: the tokenizer's transformers import may load torch and its own CUDA
            # libraries, which should not happen while llama.cpp loads its CUDA backend (a runner
            # loading both at once died of SIGSEGV on an H200; the cause was not isolated)
            self.tokenizer = self._load_tokenizer()
            self._load_llama(llama_cpp, gguf, gpu)
        else:
            with ThreadPoolExecutor(1, thread_name_prefix="tokenizer") as beside:  # Python beside llama.cpp's C load
                tokenizer = beside.submit(self._load_tokenizer)
                self._load_llama(llama_cpp, gguf, gpu)
                self.tokenizer = tokenizer.result()  # the chat template and output markers
        size = int(llama_cpp.llama_model_size(self.model))
        if gpu:
            self.share = None  # the GPU computes; the threads only feed it
        shared = ", shared with the runners stepping at once on this machine" if self.share else ""
        self.path = (f"llama.cpp {'GPU' if gpu else 'CPU'} {self.n_threads} threads{shared}, "
                     f"{size / 2**20:.0f} MiB weights, KV {self.kv_tokens} tokens")

    def _load_llama(self, llama_cpp: Any, gguf: Path, gpu: bool) -> None:
        """The model and one context for every row (llama.cpp's calls leave the interpreter
        free)."""
        self.model = load_model(llama_cpp, gguf, gpu)
        self.vocab = Vocab(llama_cpp.llama_model_get_vocab(self.model))
        self.vocab_size = self.vocab.size
        trained = int(llama_cpp.llama_model_n_ctx_train(self.model))
        if self.max_batch >= MAX_SEQUENCES:
            raise LlamaLoadError(f"runner.max_batch {self.max_batch}: llama.cpp holds at most {MAX_SEQUENCES - 1} "
                                 "requests at once")
        n_seq = min(MAX_SEQUENCES, self.max_batch + CACHE_SEQUENCES)
        self.prefill_chunk = min(self.prefill_chunk, self.kv_tokens // 2)  # a step never outgrows the cache
        self.capacity = self.max_batch + self.prefill_chunk  # every decoding row's token and one chunk
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = self.kv_tokens
        cparams.n_batch = self.capacity
        cparams.n_ubatch = min(self.capacity, UBATCH)
        cparams.n_seq_max = n_seq
        cparams.kv_unified = True
        cparams.n_threads = cparams.n_threads_batch = self.n_threads
        cparams.no_perf = True
        cparams.flash_attn_type = FLASH_ATTN_GPU if gpu else FLASH_ATTN
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise LlamaLoadError(f"llama.cpp cannot make a context of {self.kv_tokens} tokens for {gguf.name}")
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.kv_tokens = self.kv_capacity = int(llama_cpp.llama_n_ctx(self.ctx))
        self.model_context = min(trained, self.kv_tokens) if trained > 0 else self.kv_tokens
        self.max_token_bytes = self.vocab.max_token_bytes()
        self.kv_token_bytes = kv_token_bytes(self.model)
        self.sequences = Sequences(n_seq)
        self.prefix = KeptPrefixes(llama_cpp, self.ctx, self.mem, PrefixCache(CACHE_SEQUENCES, self._cache_tokens()))
        self.batch = Batch(self.capacity)

    def _load_tokenizer(self) -> Any:
        from mlx_lm.tokenizer_utils import load as load_tokenizer

        return load_tokenizer(self.model_dir)

    def _cache_tokens(self) -> int:
        """Tokens the prefix cache may keep: its byte budget at this model's KV bytes per token,
        and never more than half the KV cache (an entry is restored whole before it is cut to
        the shared part, so it must fit beside the running rows)."""
        return min(self.kv_tokens // 2, self.prefix_cache_bytes // max(1, self.kv_token_bytes))

    def warmup(self) -> None:
        rounds = warmup.plan(self.max_batch, self.prefill_chunk, gpu=False)
        took = warmup.run(rounds, self.insert, self.step, self.active, self.next_uid, self.vocab_size)
        self.trim_cache(0)
        log.info("warm-up: %s in %.2fs", ", ".join(r.what for r in rounds), took)

    # ---- requests --------------------------------------------------------------------------
    def encode(self, params: TaskParams) -> list[int]:
        if params.prompt:
            return self.vocab.encode(params.prompt, add_special=True)
        messages, kwargs = template_inputs(params)
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
        bos = getattr(self.tokenizer, "bos_token", None)
        return self.vocab.encode(str(text), add_special=not (bos and str(text).startswith(bos)))

    def output_format(self) -> OutputFormat:
        if self._format is None:
            tok = self.tokenizer
            self._format = OutputFormat(
                think=(tok.think_start, tok.think_end) if tok.has_thinking else None,
                think_start_ids=tuple(tok.think_start_tokens or ()),
                tools=(tok.tool_call_start, tok.tool_call_end) if tok.has_tool_calling else None,
                parse_tool=tok.tool_parser)
        return self._format

    def next_uid(self) -> int:
        return self.uid_count

    def insert(self, inserts: Sequence[RankInsert]) -> list[int]:
        """All of `inserts` join, or none (the batcher fails them all on an error)."""
        added: list[_Row] = []
        try:
            for i, ins in enumerate(inserts):
                if ins.uid != self.uid_count + i:
                    raise RuntimeError(f"batch uid {self.uid_count + i} differs from the plan's {ins.uid}")
                grammar = (GrammarMask(self._grammar_tokenizer(), self.vocab_size, ins.grammar, output_of(ins))
                           if ins.grammar else None)
                sampler = Sampler(ins.temperature, ins.top_p, ins.top_k, ins.min_p, ins.seed)
                row = _Row(ins.uid, self._take_sequence(), list(ins.prompt), ins.max_tokens, sampler, grammar, 0)
                added.append(row)
                row.done = self.prefix.restore(row.prompt, row.seq)
        except Exception:
            self._free([row.seq for row in added])
            raise
        for row in added:
            self.rows[row.uid] = row
        self.uid_count += len(added)
        return [row.done for row in added]

    def _take_sequence(self) -> int:
        seq = self.sequences.take()
        if seq is None:
            raise RuntimeError(f"no free KV sequence for a new request ({len(self.rows)} running)")
        return seq

    def _free(self, seqs: list[int]) -> None:
        for seq in seqs:
            self.lib.llama_memory_seq_rm(self.mem, seq, -1, -1)
            self.sequences.give(seq)

    def _grammar_tokenizer(self) -> Any:
        if self._lltokenizer is None:
            from llguidance.llamacpp import lltokenizer_from_vocab

            self._lltokenizer = lltokenizer_from_vocab(self.vocab.vocab)
        return self._lltokenizer

    def remove(self, uids: Sequence[int]) -> None:
        for uid in uids:
            row = self.rows.pop(uid, None)
            if row is not None:
                self._free([row.seq])
        self._maybe_idle()

    def _maybe_idle(self) -> None:
        """With no row left the KV cache holds nothing: it is cleared, so that the next request's
        cells start at the first (llama.cpp places new cells after the last ones it placed, and a
        step's attention spans every cell up to the highest in use)."""
        if self.rows:
            return
        self.lib.llama_memory_clear(self.mem, False)
        if self.share is not None:
            self.share.idle()

    def step(self) -> StepOutput:
        """One decode of every row's next piece; where the KV cache is full even without the
        prefix cache, the youngest row is taken out (`preempted`: its request goes on later) and
        the step is tried again without it."""
        preempted: list[int] = []
        while self.rows:
            if (drafted := speculate.step(self)) is not None:
                return StepOutput([], drafted, preempted)
            outputs, progress, firsts = self._fill_batch()
            try:
                self.decode()
            except KvCacheFull:
                if len(self.rows) == 1:
                    raise
                for row, first in firsts:  # nothing of this batch stays in the cache
                    self.lib.llama_memory_seq_rm(self.mem, row.seq, first, -1)
                    row.done = min(row.done, first)
                preempted.append(self._preempt_youngest())
                continue
            logits = self.batch.outputs(self.lib, self.ctx, len(outputs), self.vocab_size)
            tokens = [self._next(row, logits[i]) for i, row in enumerate(outputs)]
            return StepOutput(progress, tokens, preempted)
        return StepOutput([], [], preempted)

    def _fill_batch(self) -> tuple[list[_Row], list[PromptProgress], list[tuple[_Row, int]]]:
        """The step's batch: each decoding row's last token and the prefilling rows' next prompt
        pieces (oldest first). The rows whose logits it gives (in batch order), the prompts'
        progress, and each row's first position in it."""
        batch = self.batch
        batch.clear()
        outputs: list[_Row] = []
        firsts: list[tuple[_Row, int]] = []
        for row in self.rows.values():
            if row.decoding:
                position = len(row.prompt) + len(row.output) - 1
                batch.add([row.output[-1]], position, row.seq, True)
                outputs.append(row)
                firsts.append((row, position))
        prefilling = [r for r in self.rows.values() if not r.decoding]  # oldest first (insertion order)
        takes = prefill_in_order(min(self.prefill_chunk, batch.capacity - batch.n),
                                 [len(r.prompt) - r.done for r in prefilling])
        progress = []
        for row, take in zip(prefilling, takes):
            if take <= 0:
                break
            last = row.done + take >= len(row.prompt)
            batch.add(row.prompt[row.done:row.done + take], row.done, row.seq, last)
            firsts.append((row, row.done))
            row.done += take
            progress.append(PromptProgress(row.uid, row.done, len(row.prompt)))
            if last:
                outputs.append(row)
        return outputs, progress, firsts

    def _preempt_youngest(self) -> int:
        """The newest row out of the batch and its cells freed (its request resumes elsewhere or
        here later, with its answer so far as its continuation)."""
        row = self.rows.pop(max(self.rows))
        self._free([row.seq])
        log.warning("KV cache full (%d tokens): row %d taken out after %d prompt and %d answer tokens",
                    self.kv_tokens, row.uid, row.done, len(row.output))
        return row.uid

    def _set_threads(self, n: int) -> None:
        self.lib.llama_set_n_threads(self.ctx, n, n)
        log.debug("stepping with %d threads (%d runners stepping on this machine)", n,
                  self.share.busy_runners if self.share else 1)

    def decode(self) -> None:
        """`llama_decode` of the batch, making room in the KV cache from the prefix cache."""
        if self.share is not None:
            self.stepping_threads = self.share.step_with(time.monotonic(), self.stepping_threads, self._set_threads)
        rc = self.lib.llama_decode(self.ctx, self.batch.ready())
        if rc == 1:  # the running rows fill it (the prefix cache holds no cells: `prefix.py`)
            raise KvCacheFull(f"llama_decode failed: the KV cache ({self.kv_tokens} tokens) is full")
        if rc != 0:
            raise RuntimeError(f"llama_decode failed ({rc}): see the runner's log")

    def _next(self, row: _Row, raw: np.ndarray) -> TokenOut:
        values = raw  # llama.cpp's buffer (`Logits`)
        if row.grammar is not None:
            allowed = row.grammar.allowed(row.output[-1] if row.output else None)
            if allowed is not None:
                values = np.where(allowed[:len(raw)], raw, np.float32(-np.inf))  # a masked copy
        out = self.emit(row, row.sampler(values), values)
        if out.finish is not None:
            self.retire(row)
        return out

    def emit(self, row: _Row, token: int, values: np.ndarray) -> TokenOut:
        """`token` given to the row (chosen from `values`), and whether it ends the row."""
        row.output.append(token)
        finish = ("stop" if self.vocab.is_end(token) else
                  "length" if len(row.output) >= row.max_tokens else None)
        return TokenOut(row.uid, token, Logits(values), finish)

    def retire(self, row: _Row) -> None:
        """A row that ended: out of the batch, its cells copied out as a prefix-cache entry."""
        del self.rows[row.uid]
        self.prefix.keep(row.seq, row.prompt + row.output[:-1])  # the last token was never run
        self._free([row.seq])
        self._maybe_idle()

    def active(self) -> int:
        return len(self.rows)

    # ---- prefix cache ----------------------------------------------------------------------
    def cache_entries(self) -> int:
        return len(self.prefix)

    def trim_cache(self, entries: int) -> None:
        self.prefix.trim(entries)

    # ---- text ------------------------------------------------------------------------------
    def detokenizer(self) -> Detokenizer:
        return PieceDetokenizer(self.vocab)

    def piece(self, token: int) -> str:
        return self.vocab.piece(token).decode(errors="replace")

    def logprob_of(self, logprobs: Any, token: int, k: int) -> tuple[float, list[tuple[int, float]]]:
        return top_logprobs(log_softmax(logprobs.values), token, k)

    def peak_memory(self) -> int:
        return (int(self.lib.llama_model_size(self.model)) + self.kv_tokens * self.kv_token_bytes
                + self.prefix.bytes())  # the prefix cache, in host memory
