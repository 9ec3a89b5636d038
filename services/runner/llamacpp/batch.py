"""One `llama_batch` whose arrays numpy owns, so a step fills it with vectorized writes.

`llama_batch_init` allocates per-token sequence-id arrays that Python would fill token by token
(a 256-token prefill chunk is 1,500 ctypes writes). Here every token has exactly one sequence
id, kept in one int32 array the batch's `seq_id` pointers point into; the arrays live as long
as this object (never passed to `llama_batch_free`).

`outputs` reads the logits a decode gave as a numpy view of llama.cpp's own buffer (no copy;
`np.ctypeslib.as_array` built a ctypes type at every call: ~75 us a step on a 2-core VM, with a
copy of each row ~30 us more, out of a ~9 ms single-stream step).
"""

from __future__ import annotations

import ctypes
from typing import Any, cast

import numpy as np


class Batch:
    def __init__(self, capacity: int) -> None:
        import llama_cpp

        self.capacity = capacity
        self.token = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq = np.zeros(capacity, dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        seq_base = self.seq.ctypes.data
        self._seq_ptrs = (ctypes.POINTER(ctypes.c_int32) * capacity)(
            *[ctypes.cast(seq_base + 4 * i, ctypes.POINTER(ctypes.c_int32)) for i in range(capacity)])
        raw = cast(Any, llama_cpp.llama_batch())  # filled field by field with our pointers
        raw.token = self.token.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        raw.embd = None
        raw.pos = self.pos.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        raw.n_seq_id = self.n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        raw.seq_id = ctypes.cast(self._seq_ptrs, ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)))
        raw.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        self.raw = raw
        self.n = 0
        self._logit_types: dict[tuple[int, int], Any] = {}  # ctypes array type per (rows, vocab) (`outputs`)

    def clear(self) -> None:
        self.n = 0

    def add(self, tokens: list[int], start_pos: int, seq: int, want_last: bool, want_all: bool = False) -> int:
        """Append a run of one sequence's tokens at positions `start_pos ..`; the batch index of
        its last token (whose logits are kept when `want_last`; every token's with `want_all`,
        as a speculative step verifies each draft)."""
        k, i = len(tokens), self.n
        if i + k > self.capacity:
            raise ValueError(f"batch of {self.capacity} tokens cannot take {i + k}")
        self.token[i:i + k] = tokens
        self.pos[i:i + k] = np.arange(start_pos, start_pos + k, dtype=np.int32)
        self.seq[i:i + k] = seq
        self.logits[i:i + k] = 1 if want_all else 0
        self.logits[i + k - 1] = 1 if want_last or want_all else 0
        self.n = i + k
        return i + k - 1

    def outputs(self, lib: Any, ctx: Any, rows: int, vocab: int) -> np.ndarray:
        """The last decode's logits, `rows` x `vocab` float32, in batch order: a view of
        llama.cpp's buffer, valid until the context's next decode (read it within the step)."""
        kind = self._logit_types.get((rows, vocab))
        if kind is None:
            kind = self._logit_types[(rows, vocab)] = ctypes.c_float * (rows * vocab)
        address = ctypes.cast(lib.llama_get_logits(ctx), ctypes.c_void_p).value
        if not address:
            raise RuntimeError("llama.cpp gave no logits for the step")
        view = np.frombuffer(cast(Any, kind.from_address(address)), dtype=np.float32).reshape(rows, vocab)
        view.flags.writeable = False  # llama.cpp's own buffer: a row to mask is copied first
        return view

    def ready(self) -> Any:
        """The C struct for `llama_decode`, sized to what was added."""
        self.raw.n_tokens = self.n
        return self.raw
