"""Constrained decoding: a request's grammar (`api/response_format.py`) as an mlx-lm logits processor.

llguidance computes, per step, the set of tokens that keep the output a valid prefix of the
grammar; every other token's logit becomes -inf before sampling, so greedy and sampled requests
alike can only produce JSON of the request's schema. Once the JSON is complete only EOS is
allowed, which ends the request. Every rank of a sharded instance builds the same processor
from `RankInsert.grammar`, so their samples stay identical.
"""

from __future__ import annotations

from typing import Any, cast

import mlx.core as mx
import numpy as np

_TOKENIZERS: dict[int, Any] = {}


def _tokenizer(hf_tokenizer: Any, vocab: int, eos: list[int]) -> Any:
    """The llguidance view of the model's tokenizer, built once per runner (about a second)."""
    import llguidance.hf

    key = id(hf_tokenizer)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=vocab, eos_token=eos)
    return _TOKENIZERS[key]


class GrammarProcessor:
    """An mlx-lm logits processor for one request: `(tokens, logits) -> logits`. BatchGenerator
    calls it once per sampled token with the row's context; the first call comes before any
    output token, every later call has exactly one new token at the end."""

    def __init__(self, hf_tokenizer: Any, vocab: int, eos: list[int], grammar: str) -> None:
        import llguidance

        self.matcher = llguidance.LLMatcher(_tokenizer(hf_tokenizer, vocab, eos), grammar, log_level=0)
        if self.matcher.is_error():
            raise ValueError(f"response_format: {self.matcher.get_error()}")
        self.vocab = vocab
        self.started = False

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self.started:
            self.matcher.consume_token(int(cast(int, tokens[-1].item())))  # token ids: mlx types item() as any scalar
        self.started = True
        words = np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint32)
        allowed = np.unpackbits(words.view(np.uint8), bitorder="little")[:logits.shape[-1]].astype(bool)
        if not allowed.any():  # the matcher failed (it never should): let the row end on EOS
            return logits
        return mx.where(mx.array(allowed), logits, mx.array(-np.inf, dtype=logits.dtype))
