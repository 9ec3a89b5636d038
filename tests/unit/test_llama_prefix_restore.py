"""The llama.cpp engine's prefix-cache bookkeeping around llama.cpp's calls, against a fake of
the binding that records them (no model is loaded): an entry restored into a new row's own
sequence and cut to the shared part; an entry that cannot be restored leaves the row to prefill
its whole prompt, with nothing of the entry left in its sequence; the KV memory is cleared only
once no row is left."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skulk.services.runner.llamacpp.engine import LlamaCppEngine
from skulk.services.runner.llamacpp.kept import KeptPrefixes
from skulk.services.runner.llamacpp.prefix import PrefixCache, Sequences
from skulk.wire.inference import RankInsert


class FakeLlamaLib:
    """The few llama.cpp calls the prefix cache makes, recorded; `room` and `cuts` say whether a
    restore finds room in the KV cache and whether a sequence may be cut."""

    def __init__(self, room: bool = True, cuts: bool = True) -> None:
        self.room, self.cuts = room, cuts
        self.calls: list[tuple[Any, ...]] = []

    def llama_state_seq_set_data(self, _ctx: object, blob: Any, size: int, seq: int) -> int:
        self.calls.append(("restore", seq, size))
        return size if self.room else 0

    def llama_memory_seq_rm(self, _mem: object, seq: int, p0: int, p1: int) -> bool:
        self.calls.append(("cut", seq, p0, p1))
        return self.cuts or p0 < 0

    def llama_memory_clear(self, _mem: object, data: bool) -> None:
        self.calls.append(("clear", data))


def engine(lib: FakeLlamaLib) -> LlamaCppEngine:
    eng = LlamaCppEngine(Path("/nowhere"), max_batch=4, prefill_chunk=256, prefix_cache_bytes=1 << 20)
    eng.lib, eng.ctx, eng.mem, eng.share = lib, object(), object(), None
    eng.sequences, eng.prefix = Sequences(12), KeptPrefixes(lib, eng.ctx, eng.mem, PrefixCache(8, 1000))
    eng.prefix.blobs[0] = bytearray(64)  # an entry of 40 tokens, as `keep` leaves it
    eng.prefix.cache.add(0, list(range(100, 140)))
    eng.prefix.count = 1
    return eng


def ask(uid: int, prompt: list[int]) -> RankInsert:
    return RankInsert(uid=uid, prompt=tuple(prompt), max_tokens=8, temperature=0.0, top_p=1.0, top_k=0,
                      min_p=0.0, seed=0, cached=0)


def test_a_hit_is_restored_into_the_rows_own_sequence_and_cut_to_the_shared_part() -> None:
    lib = FakeLlamaLib()
    eng = engine(lib)
    assert eng.insert([ask(0, list(range(100, 130)) + [7, 8])]) == [30]
    seq = eng.rows[0].seq
    assert lib.calls == [("restore", seq, 64), ("cut", seq, 30, -1)]


def test_an_entry_without_room_leaves_the_row_to_prefill_its_whole_prompt() -> None:
    lib = FakeLlamaLib(room=False)
    eng = engine(lib)
    assert eng.insert([ask(0, list(range(100, 130)) + [7, 8])]) == [0]
    seq = eng.rows[0].seq
    assert lib.calls[-1] == ("cut", seq, -1, -1)  # nothing of the entry stays in its sequence
    assert len(eng.prefix) == 1  # the entry is kept for later


def test_an_entry_whose_cut_is_refused_is_not_used() -> None:
    lib = FakeLlamaLib(cuts=False)
    eng = engine(lib)
    assert eng.insert([ask(0, list(range(100, 130)) + [7, 8])]) == [0]
    assert lib.calls[-1] == ("cut", eng.rows[0].seq, -1, -1)


def test_the_kv_memory_is_cleared_only_once_no_row_is_left() -> None:
    lib = FakeLlamaLib()
    eng = engine(lib)
    eng.insert([ask(0, [1, 2, 3]), ask(1, [4, 5, 6])])
    eng.remove([0])
    assert ("clear", False) not in lib.calls
    eng.remove([1])
    assert lib.calls[-1] == ("clear", False)
