"""The llama.cpp engine's prefix cache in host memory: `PrefixCache` decides what is kept and
reused; this copies a finished row's cells out of llama.cpp's KV cache and back into a new row's
sequence (why they are kept out of it: `prefix.py`)."""

from __future__ import annotations

import ctypes
import logging
from typing import Any

from skulk.services.runner.llamacpp.prefix import PrefixCache

log = logging.getLogger("skulk.runner")


class KeptPrefixes:
    def __init__(self, lib: Any, ctx: Any, mem: Any, cache: PrefixCache) -> None:
        self.lib, self.ctx, self.mem, self.cache = lib, ctx, mem, cache
        self.blobs: dict[int, ctypes.Array[ctypes.c_uint8] | bytearray] = {}  # entry -> its cells' bytes
        self.count = 0

    def __len__(self) -> int:
        return len(self.cache)

    def bytes(self) -> int:
        return sum(len(blob) for blob in self.blobs.values())

    def restore(self, prompt: list[int], seq: int) -> int:
        """The entry sharing the longest prefix with `prompt` restored into `seq` and cut to the
        shared part; the tokens the row need not prefill (0 with no entry, or where the KV cache
        has no room for it)."""
        if (hit := self.cache.nearest(prompt)) is None:
            return 0
        key, shared = hit
        blob = self.blobs[key]
        restored = self.lib.llama_state_seq_set_data(self.ctx, blob, len(blob), seq) == len(blob)
        if not restored or not self.lib.llama_memory_seq_rm(self.mem, seq, shared, -1):
            # no contiguous room for the whole entry (or a model whose memory cannot be cut):
            # the row prefills its prompt instead
            self.lib.llama_memory_seq_rm(self.mem, seq, -1, -1)
            log.debug("prefix-cache entry %d not restored (%s): prefilling %d tokens instead", key,
                      "cut refused" if restored else "no room in the KV cache", shared)
            return 0
        return shared

    def keep(self, seq: int, tokens: list[int]) -> None:
        """A finished row's cells copied into host memory as an entry, where the cache takes one
        of its length (the caller frees the row's cells either way)."""
        if not self.cache.takes(len(tokens)):
            return
        size = int(self.lib.llama_state_seq_get_size(self.ctx, seq))
        blob = (ctypes.c_uint8 * size)()
        if size <= 0 or self.lib.llama_state_seq_get_data(self.ctx, blob, size, seq) != size:
            return
        key = self.count
        self.count += 1
        self.blobs[key] = blob
        self._drop(self.cache.add(key, tokens))

    def trim(self, entries: int) -> None:
        self._drop(self.cache.trim(entries))

    def _drop(self, keys: list[int]) -> None:
        for key in keys:
            self.blobs.pop(key, None)
