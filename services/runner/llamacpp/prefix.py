"""Which KV sequences the running rows hold, and what the prefix cache keeps (pure).

A finished request's keys and values are copied out of llama.cpp's KV cache into host memory
(`llama_state_seq_get_data`) and kept as a prefix-cache entry under the tokens they hold; its
cells are freed. A new prompt that shares a prefix with an entry has the entry restored into its
own sequence (`llama_state_seq_set_data`, then the cells past the shared part removed) and
prefills only the rest. Kept out of the KV cache, entries cost the running rows nothing: in one
unified cache a step's attention spans every cell up to the highest one held, so entries kept
there slowed every later step (docs/engines.md). Entries are evicted least recently used first,
by count and by tokens held; `PrefixCache` keys them by an id the engine gives.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

MIN_REUSE = 8
"""A shorter shared prefix (a chat template's first tokens) is prefilled again."""


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens `a` and `b` share."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


class Sequences:
    """The free sequence ids of a context of `n_seq` (0 .. n_seq - 1), lowest first."""

    def __init__(self, n_seq: int) -> None:
        self.free = list(range(n_seq - 1, -1, -1))

    def take(self) -> int | None:
        return self.free.pop() if self.free else None

    def give(self, seq: int) -> None:
        self.free.append(seq)
        self.free.sort(reverse=True)


class PrefixCache:
    def __init__(self, max_entries: int, max_tokens: int) -> None:
        self.max_entries, self.max_tokens = max_entries, max_tokens
        self.entries: OrderedDict[int, np.ndarray] = OrderedDict()  # entry -> its tokens, oldest first

    def __len__(self) -> int:
        return len(self.entries)

    def tokens(self) -> int:
        return sum(len(t) for t in self.entries.values())

    def nearest(self, prompt: list[int]) -> tuple[int, int] | None:
        """(entry's key, usable shared length) of the entry sharing the longest prefix with
        `prompt`, at least `MIN_REUSE` tokens and always leaving one prompt token to run."""
        want = np.asarray(prompt, dtype=np.int32)
        best: tuple[int, int] | None = None
        for seq, held in self.entries.items():
            n = min(common_prefix(want, held), len(prompt) - 1)
            if n >= MIN_REUSE and (best is None or n > best[1]):
                best = (seq, n)
        if best is not None:
            self.entries.move_to_end(best[0])
        return best

    def takes(self, n_tokens: int) -> bool:
        """Whether an entry of `n_tokens` would be kept (the caller copies it out only then)."""
        return self.max_entries > 0 and 0 < n_tokens <= self.max_tokens

    def add(self, key: int, tokens: list[int]) -> list[int]:
        """Keep entry `key` under `tokens`; the entries evicted to make room (to be dropped)."""
        if not self.takes(len(tokens)):
            return [key]
        self.entries[key] = np.asarray(tokens, dtype=np.int32)
        evicted = []
        while len(self.entries) > self.max_entries or self.tokens() > self.max_tokens:
            evicted.append(self.entries.popitem(last=False)[0])
        return evicted

    def trim(self, entries: int) -> list[int]:
        """Evict down to `entries`; the entries evicted."""
        evicted = []
        while len(self.entries) > max(0, entries):
            evicted.append(self.entries.popitem(last=False)[0])
        return evicted
