"""Prompt-lookup speculation on the llama.cpp engine, for a lone stream with no grammar.

The same rule as the MLX path (`services/runner/speculate.py`: `propose` and `accepted` are
shared): while the engine holds one decoding row and nothing else, a step proposes up to `k`
tokens from n-grams of the row's prompt and output, runs the model once over the row's last
token and the drafts (one `llama_decode`, a logit row per position), and keeps the drafts the
row's own sampler would have chosen (greedy: llama.cpp's arg-max; sampled: a draw of the row's
seeded sampler at each position), plus that sampler's next token: up to k+1 tokens for one
step. The rejected drafts' cells leave the row's KV sequence (`llama_memory_seq_rm`), so its
cache is the one plain decoding builds. Any other step (a second row, a prompt prefilling, a
grammar, no n-gram to copy) is the engine's plain step, and so are the steps after a proposal
whose every draft was rejected (1, then 3, 7, 15 and at most 16 steps after misses in a row; a
kept draft ends the back-off).

llama.cpp's CPU kernels are not batch-invariant (a run of five tokens takes other code paths
than one), so a greedy answer may part from plain decoding's where the model's two best tokens
are nearly tied, as eight rows at once already may; elsewhere it is the same answer.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from skulk.services.runner.engine import TokenOut
from skulk.services.runner.speculate import SpecMode, SpecSettings, accepted, propose

if TYPE_CHECKING:
    from skulk.services.runner.llamacpp.engine import LlamaCppEngine


MAX_WAIT = 16
"""Plain steps at most between proposals after a run of missed ones (1, 3, 7, 15, 16 ...): a
verify of k+1 positions costs several single steps on a CPU without a batched kernel for the
file's type (3.5x for five positions of SmolLM2's Q4_1 on a 2-core x86), so text the prompt does
not predict should not pay it every step. (Waiting longer, or drafting from 3-grams only, cost
the copying answers more than it saved the free ones in `bench_speculation`.)"""


def describe(spec: SpecSettings) -> tuple[SpecSettings, str]:
    """The settings this engine runs with and what `RunnerReady.speculation` says of them: the
    prompt lookup it does, or why it does none (a drafter model is the MLX path's only)."""
    if spec.mode is SpecMode.PROMPT_LOOKUP:
        return spec, f"{spec.mode.value} x{spec.num_draft_tokens}, up to 1 stream"
    if spec.mode is SpecMode.DRAFTER:
        return SpecSettings(), "off: llama.cpp speculates by prompt lookup only (drafter asked)"
    return SpecSettings(), ""


def step(engine: LlamaCppEngine) -> list[TokenOut] | None:
    """One speculative step of the engine's lone row, or None where it does not apply (the
    caller takes the plain step)."""
    if engine.spec.mode is not SpecMode.PROMPT_LOOKUP or len(engine.rows) != 1:
        return None
    (row,) = engine.rows.values()
    room = row.max_tokens - len(row.output)  # tokens the row may still give
    k = min(engine.spec.num_draft_tokens, room - 1)
    if not row.decoding or row.grammar is not None or k <= 0:
        return None
    if row.spec_wait > 0:
        row.spec_wait -= 1
        return None
    drafts = propose([*row.prompt, *row.output], k)
    if not drafts:
        return None
    last = len(row.prompt) + len(row.output) - 1  # the position of the row's last token (not yet run)
    engine.batch.clear()
    engine.batch.add([row.output[-1], *drafts], last, row.seq, want_last=True, want_all=True)
    engine.decode()
    values = list(engine.batch.outputs(engine.lib, engine.ctx, len(drafts) + 1, engine.vocab_size))
    choices = [row.sampler(v) for v in values]  # the sampler's choice after the token and each draft
    kept = accepted(drafts, choices)
    row.spec_misses = 0 if kept else row.spec_misses + 1
    row.spec_wait = min(MAX_WAIT, (1 << row.spec_misses) - 1)
    out: list[TokenOut] = []
    for j, token in enumerate([*drafts[:kept], choices[kept]]):
        out.append(engine.emit(row, token, values[j]))
        if out[-1].finish is not None:
            break
    given = len(out)
    engine.lib.llama_memory_seq_rm(engine.mem, row.seq, last + given, -1)  # the cache ends at the last token run
    out[0] = replace(out[0], accepted=given - 1, rejected=len(drafts) - (given - 1))
    if out[-1].finish is not None:
        engine.retire(row)
    return out
