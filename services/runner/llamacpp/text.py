"""Token ids <-> text through llama.cpp's own vocabulary (never a second tokenizer's idea of it).

The prompt's text comes from the chat template (`engine.py`); its ids are llama.cpp's, so a
prompt is the sequence llama.cpp itself would run. Output text is each token's bytes joined and
decoded as UTF-8 incrementally: a character split across tokens is held back until it is whole.
"""

from __future__ import annotations

import codecs
import ctypes
from typing import Any

PIECE_BUFFER = 256


class Vocab:
    def __init__(self, vocab: Any) -> None:
        import llama_cpp

        self._lib = llama_cpp
        self.vocab = vocab
        self.size = int(llama_cpp.llama_vocab_n_tokens(vocab))
        self._buf = ctypes.create_string_buffer(PIECE_BUFFER)
        self._pieces: dict[int, bytes] = {}

    def encode(self, text: str, add_special: bool, parse_special: bool = True) -> list[int]:
        """`text`'s token ids (special tokens written in it, like `<|im_start|>`, parsed as such)."""
        data = text.encode()
        room = len(data) + 16
        out = (self._lib.llama_token * room)()
        n = self._lib.llama_tokenize(self.vocab, data, len(data), out, room, add_special, parse_special)
        if n < 0:  # never: a token covers at least one byte
            raise ValueError(f"llama.cpp needs {-n} tokens for a {len(data)}-byte prompt")
        return list(out[:n])

    def piece(self, token: int) -> bytes:
        """The bytes `token` stands for in output (a control token like EOS: none)."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        if not 0 <= token < self.size:
            raise ValueError(f"token {token} is not in the vocabulary of {self.size}")
        n = self._lib.llama_token_to_piece(self.vocab, token, self._buf, PIECE_BUFFER, 0, False)
        if n < 0:
            raise ValueError(f"token {token}'s text is longer than {PIECE_BUFFER} bytes")
        piece = self._buf.raw[:n]
        self._pieces[token] = piece
        return piece

    def is_end(self, token: int) -> bool:
        """An end-of-generation token (EOS, EOT, `<|im_end|>` ...)."""
        return bool(self._lib.llama_vocab_is_eog(self.vocab, token))

    def max_token_bytes(self) -> int:
        return max((len(self.piece(t)) for t in range(self.size)), default=1) or 1


class Detokenizer:
    """mlx-lm's streaming detokenizer interface over llama.cpp's pieces: `last_segment` is the
    text completed since it was last read (`add_token` and `finalize` both add to it)."""

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def add_token(self, token: int) -> None:
        self._pending += self.decoder.decode(self.vocab.piece(token))

    def finalize(self) -> None:
        self._pending += self.decoder.decode(b"", final=True)

    @property
    def last_segment(self) -> str:
        text, self._pending = self._pending, ""
        return text
