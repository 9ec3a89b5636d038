"""Constrained decoding: a request's grammar (`api/dialects/fields.py`) as a mask on its logits.

llguidance computes, per step, the set of tokens that keep the output a valid prefix of the
grammar; every other token's logit becomes -inf before sampling, so greedy and sampled requests
alike can only produce JSON of the request's schema. Once the JSON is complete only EOS is
allowed, which ends the request. Every rank of a sharded instance builds the same processor
from `RankInsert.grammar`, so their samples stay identical.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

_TOKENIZERS: dict[int, Any] = {}


def _tokenizer(hf_tokenizer: Any, vocab: int, eos: list[int]) -> Any:
    """The llguidance view of the model's tokenizer, built once per runner (about a second)."""
    import llguidance.hf

    key = id(hf_tokenizer)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=vocab, eos_token=eos)
    return _TOKENIZERS[key]


class GrammarMask:
    """One request's grammar over an llguidance tokenizer: `allowed(last)` is the mask of the
    next token (`last`: the token sampled since the previous call, None on the first call)."""

    def __init__(self, lltokenizer: Any, vocab: int, grammar: str, already: Sequence[int] = ()) -> None:
        """`already`: output tokens the answer has (a resumed one): the grammar starts after them."""
        import llguidance

        self.matcher = llguidance.LLMatcher(lltokenizer, grammar, log_level=0)
        if self.matcher.is_error():
            raise ValueError(f"response_format: {self.matcher.get_error()}")
        for token in already:
            self.matcher.consume_token(token)
        self.vocab = vocab

    def allowed(self, last: int | None) -> np.ndarray | None:
        """The tokens that keep the output valid (None: the matcher failed, let anything through)."""
        if last is not None:
            self.matcher.consume_token(last)
        words = np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint32)
        allowed = np.unpackbits(words.view(np.uint8), bitorder="little")[:self.vocab].astype(bool)
        return allowed if allowed.any() else None


class GrammarProcessor:
    """An mlx-lm logits processor for one request: `(tokens, logits) -> logits`. BatchGenerator
    calls it once per sampled token with the row's context; the first call comes before any
    output token, every later call has exactly one new token at the end."""

    def __init__(self, hf_tokenizer: Any, vocab: int, eos: list[int], grammar: str,
                 already: Sequence[int] = ()) -> None:
        self.mask = GrammarMask(_tokenizer(hf_tokenizer, vocab, eos), vocab, grammar, already)
        self.started = False

    def __call__(self, tokens: Any, logits: Any) -> Any:
        import mlx.core as mx

        last = int(cast(int, tokens[-1].item())) if self.started else None  # mlx types item() as any scalar
        self.started = True
        allowed = self.mask.allowed(last)
        if allowed is None or allowed.shape[0] < logits.shape[-1]:  # the matcher failed (it never should)
            return logits
        return mx.where(mx.array(allowed[:logits.shape[-1]]), logits, mx.array(-np.inf, dtype=logits.dtype))
