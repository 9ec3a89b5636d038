"""Decode-step matmuls on the CPU as row blocks on two streams: the weights read once, unpacked,
by both cores.

Why: at a decode step each linear layer multiplies a few rows (one per running request) by a
whole fp32 weight matrix, so the step costs what reading the weights costs. OpenBLAS's `sgemm`
first copies ("packs") every weight panel; `perf` of a batch-8 step on the ~100M demo model put
2/3 of the matmul time in `sgemm_incopy`. Its small-matrix kernel (x86-64 SkylakeX and later,
for `M*N*K <= 100^3` and, in this transposition, `M*N <= 1200`) reads the operands without
packing, but a call runs on one thread. So a weight of `out x in` is viewed (no copy) as blocks
of rows within those bounds, one batched matmul per half of the blocks, the halves on two mlx
CPU streams (one thread each). Measured on the 2-core machines, the ~100M model's 112 weights in
a chain at 8 rows: 38-40 ms against 48-53 ms for `x @ w.T`; a batch-8 decode step 66 -> 53 ms,
and OpenBLAS's worker no longer spins between steps. At 1 row it is no faster than `sgemv`.

Exactness: the small kernel's result for a row depends on how many rows the call has (5 rows
differ from 1 in the last bit), so the rows are padded to 8 (or 16 when more than 8 run): a
request's arithmetic never depends on what else is in the batch, and a seeded request repeats.
That holds only where the BLAS computes a row the same way in an 8- and a 16-row call (OpenBLAS's
SkylakeX small kernel does; its kernels on AMD Zen, for one, do not: a row differs by 1e-7 to
4e-6 between the two), so `install` first checks it on this machine, with weights of the model's
shapes (`exact_here`: every row of a 16-row call against the same row alone, and in calls of
other sizes), and keeps sgemm where any bit differs, whatever the timing or the switch says.
The check and the timing below are made once per machine and model and kept for later
starts (`cpu_linear_kept.py`).
Hence the limits: only single-position inputs (a decode step) take this path; only in a runner
whose batch holds at most 16 (`runner.max_batch`, the default), or a row would switch paths as
the batch grows past 16; only weights whose 16-row block at 16 rows fits the kernel (an input
width up to 3906: a wider `down_proj` keeps `sgemm` at every batch size); never in a sharded
instance, where every rank computes the logits and must pick the same path. Prompts keep
`sgemm` (a 1-token chunk at the end of a chunked prompt takes the blocks: its keys and values may
differ from an unchunked prefill's in the last bits). Results differ from `x @ w.T` by float
rounding (about 1e-6 relative).

Whether it pays is machine- and model-specific (no small kernel in other BLAS builds; weights a
CPU cache holds gain nothing from skipping the packing), so with 64 MB or more of fp32 weights
`install` times both ways through them (up to 512 MB) and takes the blocks where they need at
most 90 % of sgemm's time; the log line gives the figures. `OPENBLAS_NUM_THREADS=1` keeps all
blocks on one stream (one core). `SKULK_CPU_BLOCKED_MATMUL=1` takes the blocks without timing
(the tests use it on the tiny demo model), `=0` never; `SKULK_CPU_FAST_OPS=0` turns it off with
the other CPU kernels.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from skulk.services.runner.cpu_linear_kept import Kept, Measured, Timing

log = logging.getLogger("skulk.runner")

SMALL_KERNEL_MNK = 1_000_000
SMALL_KERNEL_MN = 1200
"""OpenBLAS's bounds for its small-matrix kernel (`M*N*K`; `M*N` for this transposition: a
160-row block of 8 rows went to the threaded packing sgemm, seen with `perf probe` on
`cblas_sgemm`)."""
MAX_ROWS = 16  # the most rows padded into one call: a larger batch keeps sgemm throughout
MIN_BLOCK = 16  # rows of weight per block at least (OpenBLAS's kernels work in 16s)
SAMPLE_BYTES = 512 << 20  # weights timed at install: more than a CPU cache holds
MIN_GAIN = 0.9  # the blocks must take at most this share of sgemm's time
MIN_AUTO_BYTES = 64 << 20
"""Smaller fp32 weights stay on sgemm without timing: a CPU cache holds them, and there the
packing costs little (measured: equal at 64 MB, the blocks 25-40 % faster from 256 MB)."""


class Mode(StrEnum):
    AUTO = "auto"  # time both ways at load
    ON = "1"
    OFF = "0"


class Reason(StrEnum):
    FASTER = "faster"
    FORCED = "forced"
    OFF = "off"
    NO_FP32 = "no fp32 weights"
    WIDE_BATCH = "runner.max_batch above 16"
    SHARDED = "sharded instance"
    CACHE_SIZED = "weights a cache holds"
    SLOWER = "not faster"
    NOT_EXACT = "not exact on this CPU"
    NO_LAYOUT = "no weight narrow enough for blocks"


@dataclass(frozen=True, slots=True)
class Choice:
    blocked: bool
    reason: Reason
    detail: str = ""

    def line(self) -> str:
        how = "row blocks" if self.blocked else "sgemm"
        return f"decode matmuls: {how} ({self.reason}{': ' + self.detail if self.detail else ''})"


def mode_from_env(value: str | None) -> Mode:
    try:
        return Mode(value or Mode.AUTO)
    except ValueError:
        log.warning("SKULK_CPU_BLOCKED_MATMUL=%r is not auto, 1 or 0: timing at load", value)
        return Mode.AUTO


def precheck(mode: Mode, fp32_bytes: int, max_batch: int, sharded: bool) -> Choice | None:
    """The choice made without timing, or None where timing decides."""
    if mode is Mode.OFF:
        return Choice(False, Reason.OFF)
    if fp32_bytes == 0:
        return Choice(False, Reason.NO_FP32)
    if max_batch > MAX_ROWS:
        return Choice(False, Reason.WIDE_BATCH, str(max_batch))
    if sharded:
        return Choice(False, Reason.SHARDED)
    if mode is Mode.ON:
        return Choice(True, Reason.FORCED)
    if fp32_bytes < MIN_AUTO_BYTES:
        return Choice(False, Reason.CACHE_SIZED, f"{fp32_bytes >> 20} MB")
    return None


def by_exactness(differs: str) -> Choice | None:
    """sgemm where a row's bits in blocks depend on the batch (`differs` says where; "" if
    nowhere); None: exact, the other conditions decide."""
    return Choice(False, Reason.NOT_EXACT, differs) if differs else None


def exact_detail(checked: int) -> str:
    return f"exact on this CPU ({checked} weight shapes checked)"


def by_timing(plain_ms: float, blocked_ms: float, weights: int) -> Choice:
    detail = f"{blocked_ms:.1f} ms in blocks vs {plain_ms:.1f} ms sgemm through {weights} weights"
    if blocked_ms <= MIN_GAIN * plain_ms:
        return Choice(True, Reason.FASTER, detail)
    return Choice(False, Reason.SLOWER, detail)


def padded_rows(rows: int) -> int:
    """The row count a decode call is padded to (8 or 16): fixed per call size class so a row's
    arithmetic does not depend on the batch."""
    return 8 if rows <= 8 else 16


def fits(n_in: int) -> bool:
    """Whether a weight of this input width has a block layout at every padded row count."""
    return MAX_ROWS * MIN_BLOCK * n_in <= SMALL_KERNEL_MNK


def block_rows(rows: int, n_in: int, n_out: int) -> int:
    """Rows of weight per block (for a width that `fits`): `n_out` itself when one block is
    within the small kernel's bounds, else the largest multiple of 16 within them that divides
    `n_out`, or failing that the largest within them (the rows left over make one smaller block:
    a 673-token vocabulary, say)."""
    best = max(MIN_BLOCK, min(SMALL_KERNEL_MNK // (rows * n_in), SMALL_KERNEL_MN // rows) // 16 * 16)
    if best >= n_out:
        return n_out
    for r in range(best, max(MIN_BLOCK - 1, best // 2), -16):
        if n_out % r == 0:
            return r
    return best


def blas_threads() -> int:
    """OpenBLAS's thread count as the node's environment sets it (0: its default, all cores)."""
    try:
        return int(os.environ.get("OPENBLAS_NUM_THREADS", "0") or 0)
    except ValueError:
        return 0


class BlockedMatmul:
    """`x @ w.T` for the decode rows of one model, with the weights' block views cached."""

    def __init__(self, two_streams: bool) -> None:
        import mlx.core as mx

        self.mx = mx
        self.second = mx.new_stream(mx.cpu) if two_streams else None
        self._views: dict[tuple[int, int], tuple[Any, Any, Any]] = {}  # (id(w), rows) -> (w, blocks, rest)

    def applies(self, x: Any, w: Any) -> bool:
        """A decode step's rows (one position each, at most 16) by an fp32 weight with a layout."""
        return (x.ndim >= 2 and x.shape[-2] == 1 and w.dtype == self.mx.float32 and w.ndim == 2
                and 0 < _rows(x) <= MAX_ROWS and fits(w.shape[1]))

    def view(self, w: Any, rows: int) -> tuple[Any, Any]:
        """The weight as (blocks `(n, in, r)`, leftover rows `(in, t)` or None): strided views
        of the same memory, no copy. Held with the weight itself, so a weight replaced later
        (another array under a reused id) gets fresh views."""
        key = (id(w), rows)
        cached = self._views.get(key)
        if cached is None or cached[0] is not w:
            n_out, n_in = w.shape
            r = block_rows(rows, n_in, n_out)
            whole = n_out - n_out % r
            blocks = w[:whole].reshape(whole // r, r, n_in).swapaxes(-1, -2)
            rest = w[whole:].T if whole < n_out else None
            self.mx.eval(blocks, *([rest] if rest is not None else []))
            cached = self._views[key] = (w, blocks, rest)
        return cached[1], cached[2]

    def __call__(self, x: Any, w: Any) -> Any:
        """`x @ w.T` through the blocks (for inputs it `applies` to): the first half of them on
        this stream, the rest on the second."""
        mx = self.mx
        rows, n_in = _rows(x), x.shape[-1]
        pad = padded_rows(rows)
        blocks, rest = self.view(w, pad)
        flat = x.reshape(rows, n_in)
        if rows < pad:
            flat = mx.concatenate([flat, mx.zeros((pad - rows, n_in), dtype=flat.dtype)])
        half = blocks.shape[0] // 2 if self.second is not None else 0
        if half:
            out = mx.concatenate([flat @ blocks[:half], mx.matmul(flat, blocks[half:], stream=self.second)])
        else:
            out = flat @ blocks
        out = out.swapaxes(0, 1).reshape(pad, -1)
        if rest is not None:
            out = mx.concatenate([out, flat @ rest], axis=1)
        return (out[:rows] if rows < pad else out).reshape(*x.shape[:-1], -1)


def _rows(x: Any) -> int:
    n = 1
    for d in x.shape[:-1]:
        n *= d
    return n


def install(model: Any, max_batch: int, sharded: bool, timer: Callable[[], float] = time.perf_counter) -> Choice:
    """Route the decode matmuls of `model`'s fp32 `nn.Linear` layers and embeddings (a tied
    embedding's output projection) through `BlockedMatmul` where that is the choice."""
    import mlx.core as mx
    import mlx.nn as nn

    layers = [m for m in model.modules() if type(m) in (nn.Linear, nn.Embedding) and m["weight"].dtype == mx.float32]
    weights = [m["weight"] for m in layers]
    choice = precheck(mode_from_env(os.environ.get("SKULK_CPU_BLOCKED_MATMUL")),
                      sum(w.nbytes for w in weights), max_batch, sharded)
    if choice is not None and not choice.blocked:
        return choice
    fitting = [w for w in weights if fits(w.shape[1])]
    if not fitting:
        return Choice(False, Reason.NO_LAYOUT)
    blocked = BlockedMatmul(two_streams=blas_threads() != 1 and (os.cpu_count() or 1) > 1)
    checked = len({tuple(w.shape) for w in fitting})
    kept = Kept.for_weights([tuple(w.shape) for w in fitting], blocked.second is not None, code_fingerprint())
    measured, earlier = _measure(kept, blocked, fitting, choice is None, timer)
    note = "measured at an earlier start" if earlier else ""
    inexact = by_exactness(measured.differs)
    if inexact is not None:
        return Choice(False, inexact.reason, "; ".join(d for d in (inexact.detail, note) if d))
    if choice is None:  # auto: the timing decides
        if measured.timing is None:
            raise RuntimeError("decode matmuls: an exact layout was not timed")  # `_measure` times it
        choice = by_timing(*measured.timing)
    details = (choice.detail, exact_detail(checked) if choice.blocked else "", note)
    choice = Choice(choice.blocked, choice.reason, "; ".join(d for d in details if d))
    if choice.blocked:
        classes: dict[type, type] = {nn.Linear: _blocked_subclass(nn.Linear, "__call__", blocked),
                                     nn.Embedding: _blocked_subclass(nn.Embedding, "as_linear", blocked)}
        for m in layers:
            m.__class__ = classes[type(m)]
    return choice


def _measure(kept: Kept, blocked: BlockedMatmul, weights: list[Any], timed: bool,
             timer: Callable[[], float]) -> tuple[Measured, bool]:
    """Whether the blocks are exact here and, where `timed` and they are, both ways' times: kept
    from an earlier start on this machine (`cpu_linear_kept.py`), else measured now and kept.
    True where nothing had to be measured."""
    was = kept.read()
    measured = was if was is not None else Measured(exact_here(blocked, weights))
    if timed and not measured.differs and measured.timing is None:
        measured = Measured(measured.differs, Timing(*_time_both(blocked, weights, timer)))
    if measured != was:
        kept.keep(measured)
    return measured, measured == was


@functools.cache
def code_fingerprint() -> str:
    """This file's bytes, hashed: measurements kept by another version of the block layout (its
    bounds, padding, sizes checked) are not this one's."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


EXACT_SIZES = (1, 2, 5, 8, 9, 12, 16)
"""Batch sizes a row is checked in (both padded sizes, full and partly padding)."""


def exact_here(blocked: BlockedMatmul, weights: list[Any]) -> str:
    """Where a row's result in blocks depends on the batch on this machine: "" if nowhere, else
    the first weight shape, batch size and row that differ. One weight of each shape, random
    rows (a fixed key: the sampler's random state is left alone); each of 16 rows computed
    alone is compared bit for bit with the same row in calls of `EXACT_SIZES` rows."""
    mx = blocked.mx
    seen: set[tuple[int, ...]] = set()
    for w in weights:
        if tuple(w.shape) in seen:
            continue
        seen.add(tuple(w.shape))
        x = mx.random.normal((MAX_ROWS, 1, w.shape[1]), key=mx.random.key(len(seen))).astype(w.dtype)
        alone = [blocked(x[i:i + 1], w)[0] for i in range(MAX_ROWS)]
        for rows in EXACT_SIZES:
            got = blocked(x[:rows], w)
            for i in range(rows):
                if not mx.array_equal(got[i], alone[i]).item():
                    worst = mx.abs(got[i] - alone[i]).max().item()
                    return (f"a row of {w.shape[0]}x{w.shape[1]} differs by {worst:.1e} "
                            f"between a call of 1 row and one of {rows}")
    return ""


def _time_both(blocked: BlockedMatmul, weights: list[Any], timer: Callable[[], float]) -> tuple[float, float, int]:
    """Median milliseconds for 8 rows through a sample of the weights, sgemm and blocked, each
    matmul waiting for the one before (as in a forward pass: independent products would overlap
    the two streams' work with the next call's and flatter the blocks)."""
    mx = blocked.mx
    sample: list[Any] = []
    size = 0
    for w in weights:
        if sample and size + w.nbytes > SAMPLE_BYTES:
            break
        sample.append(w)
        size += w.nbytes
    start = mx.zeros((8, 1, sample[0].shape[1]), dtype=sample[0].dtype)
    mx.eval(start)

    def chain(matmul: Callable[[Any, Any], Any]) -> Any:
        y = start
        for w in sample:  # the next input depends on this output (a zero-cost link)
            y = matmul(mx.zeros((8, 1, w.shape[1]), dtype=w.dtype) + y[..., :1] * 0.0, w)
        return y

    def median_ms(matmul: Callable[[Any, Any], Any]) -> float:
        mx.eval(chain(matmul))  # warm: views, first calls
        times = []
        for _ in range(5):
            t0 = timer()
            mx.eval(chain(matmul))
            times.append(timer() - t0)
        return sorted(times)[len(times) // 2] * 1e3

    return median_ms(lambda x, w: x @ w.T), median_ms(blocked), len(sample)


def _blocked_subclass(base: type, method: str, blocked: BlockedMatmul) -> type:
    """`base` (nn.Linear: `__call__`; nn.Embedding: `as_linear`) with the decode rows of that
    method going through `blocked`; swapped in as the loaded layers' class (no weight moves)."""
    plain = getattr(base, method)
    with_bias = method == "__call__"

    def through_blocks(self: Any, x: Any) -> Any:
        w = self["weight"]
        if not blocked.applies(x, w):
            return plain(self, x)
        y = blocked(x, w)
        return y + self["bias"] if with_bias and "bias" in self else y

    return type(f"Blocked{base.__name__}", (base,), {method: through_blocks, "__doc__": _blocked_subclass.__doc__})
