"""A fake engine for control-plane unit tests: no MLX, no model, deterministic tokens.

It follows the `Engine` protocol with the batch semantics that matter to the loop: a request
prefills `prefill_chunk` tokens per step, then emits one token per step (the token after
`t` is `(t * 7 + uid) % 97 + 3`, token 2 is EOS when `eos_after` says so), ends by itself at
`max_tokens`, and can be removed at any point. Text is one letter per token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from skulk.cluster.state import TaskParams
from skulk.services.runner.engine import OutputFormat, PromptProgress, StepOutput, TokenOut
from skulk.wire.inference import RankInsert


@dataclass
class _Row:
    ins: RankInsert
    prefilled: int = 0
    produced: int = 0
    last: int = 0


SCRIPTED = 1000
"""Tokens from here on are characters of `FakeEngine.script` (a forced output)."""


class _FakeDetok:
    def __init__(self, script: str = "") -> None:
        self.last_segment = ""
        self.script = script

    def add_token(self, token: int) -> None:
        if token < 0:
            raise ValueError(f"token {token} is not in the vocabulary")
        scripted = token - SCRIPTED
        self.last_segment = self.script[scripted] if 0 <= scripted < len(self.script) else chr(ord("a") + token % 26)

    def finalize(self) -> None:
        self.last_segment = ""


@dataclass
class FakeEngine:
    prefill_chunk: int = 4
    eos_after: int = 0  # emit EOS (token 2) as the n-th token when > 0
    poison_uid: int = -1  # this uid's tokens cannot be detokenized (a per-request failure)
    path: str = "fake"
    model_context: int = 64
    max_token_bytes: int = 4
    kv_capacity: int = 0  # > 0: a KV cache of this many cells, the youngest rows preempted when full
    rows: dict[int, _Row] = field(default_factory=dict)
    uid_count: int = 0
    cache: list[tuple[int, ...]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)  # what was asked, in order (for tests)
    script: str = ""  # when set, every row's output is this text, one character per token, then EOS
    format: OutputFormat = field(default_factory=OutputFormat)

    def load(self) -> None: ...

    def warmup(self) -> None: ...

    def encode(self, params: TaskParams) -> list[int]:
        text = params.prompt or "".join(m.content for m in params.messages)
        return [3 + ord(c) % 90 for c in text]

    def next_uid(self) -> int:
        return self.uid_count

    def insert(self, inserts: Sequence[RankInsert]) -> list[int]:
        cached = []
        for ins in inserts:
            if ins.uid != self.uid_count:
                raise RuntimeError(f"uid {ins.uid} out of order (expected {self.uid_count})")
            self.uid_count += 1
            hit = max((len(k) for k in self.cache if tuple(ins.prompt[:len(k)]) == k), default=0)
            hit = min(hit, len(ins.prompt) - 1)
            self.rows[ins.uid] = _Row(ins, prefilled=hit, last=ins.prompt[-1])
            cached.append(hit)
            self.log.append(f"insert {ins.uid}")
        return cached

    def remove(self, uids: Sequence[int]) -> None:
        for uid in uids:
            self.rows.pop(uid, None)
            self.log.append(f"remove {uid}")

    def step(self) -> StepOutput:
        preempted = []
        while len(self.rows) > 1 and 0 < self.kv_capacity < self._cells_after_step():
            uid = max(self.rows)
            del self.rows[uid]
            preempted.append(uid)
            self.log.append(f"preempt {uid}")
        prompts, tokens = [], []
        for uid, row in list(self.rows.items()):
            total = len(row.ins.prompt)
            if row.prefilled < total:
                row.prefilled = min(total, row.prefilled + self.prefill_chunk)
                prompts.append(PromptProgress(uid, row.prefilled, total))
                continue
            row.produced += 1
            if self.script:
                row.last = SCRIPTED + row.produced - 1 if row.produced <= len(self.script) else 2
            else:
                row.last = 2 if self.eos_after and row.produced == self.eos_after else (row.last * 7 + uid) % 97 + 3
            finish = "stop" if row.last == 2 else "length" if row.produced >= row.ins.max_tokens else None
            tokens.append(TokenOut(uid, -1 if uid == self.poison_uid else row.last, None, finish))
            if finish is not None:
                del self.rows[uid]
                self.cache.append(tuple(row.ins.prompt))
        return StepOutput(prompts, tokens, preempted)

    def _cells_after_step(self) -> int:
        """KV cells the rows would hold after the next step (prompt so far and tokens run)."""
        return sum(min(len(r.ins.prompt), r.prefilled + self.prefill_chunk) if r.prefilled < len(r.ins.prompt)
                   else len(r.ins.prompt) + r.produced for r in self.rows.values())

    def active(self) -> int:
        return len(self.rows)

    def cache_entries(self) -> int:
        return len(self.cache)

    def trim_cache(self, entries: int) -> None:
        del self.cache[:max(0, len(self.cache) - entries)]

    def output_format(self) -> OutputFormat:
        return self.format

    def detokenizer(self) -> _FakeDetok:
        return _FakeDetok(self.script)

    def piece(self, token: int) -> str:
        return chr(ord("a") + token % 26)

    def logprob_of(self, logprobs: object, token: int, k: int) -> tuple[float, list[tuple[int, float]]]:
        return -1.0, [(token, -1.0)][:k]

    def peak_memory(self) -> int:
        return 0
