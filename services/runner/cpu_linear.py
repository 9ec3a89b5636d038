"""Decode-step matmuls on the CPU as row blocks on two streams: the weights read once, unpacked,
by both cores.

Why: at a decode step each linear layer multiplies a few rows (one per running request) by a
whole fp32 weight matrix, so the step costs what reading the weights costs. OpenBLAS's `sgemm`
first copies ("packs") every weight panel; `perf` of a batch-8 step on the ~100M demo model put
2/3 of the matmul time in `sgemm_incopy`. Its small-matrix kernel (`M*N*K <= 100^3` on x86-64
SkylakeX and later) streams the operands without packing, but one call runs on one thread. So a
weight of `out x in` is viewed (no copy) as blocks of `r` rows with `rows * r * in` under that
bound, one batched matmul per half of the blocks, the halves on two mlx CPU streams (one thread
each). Measured on the 2-core machines, all 112 linears of the ~100M model at 8 rows: 36 ms
against 48.5 ms for `x @ w.T`; a whole batch-8 decode step 70 -> 56-62 ms; at 1 row 21.7 against
29.9 ms for the 768-wide layers (`sgemv`).

Exactness: the small kernel's result for a row depends on how many rows the call has (5 rows
differ from 1 in the last bit), so the rows are padded to 8 (or 16 when more than 8 run): a
request's arithmetic never depends on what else is in the batch, and a seeded request repeats.
Only single-position inputs (a decode step) take this path, and only in a runner whose batch
holds at most 16 (`runner.max_batch`, the default): a larger batch would switch a row between
the two paths as it grows past 16. Prompts keep `sgemm` (a 1-token prompt chunk, which can
happen at the end of a chunked prompt, takes the blocks: its key/value rows may differ from an
unchunked prefill's in the last bits). The result differs from `x @ w.T` by float rounding (about 1e-6 relative).

Whether it pays is machine- and model-specific (no small kernel in other BLAS builds; weights
that fit in a CPU cache gain nothing from skipping the packing), so `install` times both ways on
the model's weights (up to 512 MB) first and keeps the faster, logged with the figures.
`SKULK_CPU_BLOCKED_MATMUL=1` takes the blocks without timing (the tests use it on the tiny demo
model, which fits in cache), `=0` never; `SKULK_CPU_FAST_OPS=0` turns it off with the other CPU
kernels.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("skulk.runner")

SMALL_KERNEL_MNK = 1_000_000
SMALL_KERNEL_MN = 1200
"""OpenBLAS (x86-64 SkylakeX and later) takes its unpacked small-matrix kernel up to this
M*N*K, and for this transposition only up to this M*N (rows x block rows): a 160-row block
of 8 rows was sent to the threaded, packing sgemm (seen with `perf probe` on `cblas_sgemm`)."""
MAX_ROWS = 16  # decode batches above this keep `sgemm` (16 rows already fill a packed panel)
SAMPLE_BYTES = 512 << 20  # weights timed at install: more than a CPU cache holds
MIN_GAIN = 0.9  # the blocked path must take at most this share of sgemm's time
MIN_AUTO_BYTES = 64 << 20
"""Smaller fp32 weights stay on sgemm without timing: a CPU cache holds them, and there the
packing costs little (measured: equal at 64 MB, the blocks 25-40 % faster from 256 MB)."""


def padded_rows(rows: int) -> int:
    """The row count a decode call is padded to (8 or 16): fixed per call size class so a row's
    arithmetic does not depend on the batch."""
    return 8 if rows <= 8 else 16


def block_rows(rows: int, n_in: int, n_out: int) -> int:
    """Rows of weight per block: `n_out` itself when one block fits the small kernel's bounds
    (`rows * block * n_in`, `rows * block`), else the largest multiple of 16 within it that divides `n_out`, or
    failing that the largest within it (the rows left over make one smaller block: a
    673-token vocabulary, say)."""
    best = max(16, min(SMALL_KERNEL_MNK // max(1, rows * n_in), SMALL_KERNEL_MN // rows) // 16 * 16)
    if best >= n_out:
        return n_out
    for r in range(best, max(15, best // 2), -16):
        if n_out % r == 0:
            return r
    return best


class BlockedMatmul:
    """`x @ w.T` for the decode rows of one model, with the weights' block views cached."""

    def __init__(self) -> None:
        import mlx.core as mx

        self.mx = mx
        self.second = mx.new_stream(mx.cpu)
        self._views: dict[tuple[int, int], tuple[Any, Any]] = {}  # (id(weight), padded rows) -> views

    def applies(self, x: Any, w: Any) -> bool:
        mx = self.mx
        return (x.ndim >= 2 and x.shape[-2] == 1 and w.dtype == mx.float32 and w.ndim == 2
                and 0 < _rows(x) <= MAX_ROWS)

    def view(self, w: Any, rows: int) -> tuple[Any, Any]:
        """The weight as (blocks `(n, in, r)`, leftover rows `(in, t)` or None): strided views
        of the same memory, no copy."""
        key = (id(w), rows)
        if key not in self._views:
            n_out, n_in = w.shape
            r = block_rows(rows, n_in, n_out)
            whole = n_out - n_out % r
            blocks = w[:whole].reshape(whole // r, r, n_in).swapaxes(-1, -2)
            rest = w[whole:].T if whole < n_out else None
            self.mx.eval(blocks, *([rest] if rest is not None else []))
            self._views[key] = (blocks, rest)
        return self._views[key]

    def __call__(self, x: Any, w: Any) -> Any:
        """`x @ w.T` through the blocks: the first half on this stream, the rest on the second."""
        mx = self.mx
        rows, n_in = _rows(x), x.shape[-1]
        pad = padded_rows(rows)
        blocks, rest = self.view(w, pad)
        flat = x.reshape(rows, n_in)
        if rows < pad:
            flat = mx.concatenate([flat, mx.zeros((pad - rows, n_in), dtype=flat.dtype)])
        half = blocks.shape[0] // 2
        if half:
            out = mx.concatenate([flat @ blocks[:half], mx.matmul(flat, blocks[half:], stream=self.second)])
        else:
            out = flat @ blocks
        out = out.swapaxes(0, 1).reshape(pad, -1)
        if rest is not None:
            out = mx.concatenate([out, flat @ rest], axis=1)
        return (out[:rows] if rows < pad else out).reshape(*x.shape[:-1], -1)

    def forget(self) -> None:
        self._views.clear()


def _rows(x: Any) -> int:
    n = 1
    for d in x.shape[:-1]:
        n *= d
    return n


def install(model: Any, max_batch: int, timer: Callable[[], float] = time.perf_counter) -> str:
    """Route the decode matmuls of `model`'s fp32 `nn.Linear` layers (and a tied embedding's
    output projection) through `BlockedMatmul` when it is faster here; a line for the log."""
    import mlx.core as mx
    import mlx.nn as nn

    linears = [m for m in model.modules() if type(m) is nn.Linear and m["weight"].dtype == mx.float32]
    embeds = [m for m in model.modules() if type(m) is nn.Embedding and m["weight"].dtype == mx.float32]
    choice = os.environ.get("SKULK_CPU_BLOCKED_MATMUL", "auto")
    if not linears or choice == "0":
        return "decode matmuls: sgemm" + ("" if linears else " (no fp32 linear layers)")
    if max_batch > MAX_ROWS:
        return f"decode matmuls: sgemm (runner.max_batch {max_batch} > {MAX_ROWS})"
    size = sum(m["weight"].nbytes for m in linears)
    if choice != "1" and size < MIN_AUTO_BYTES:
        return f"decode matmuls: sgemm ({size >> 20} MB of fp32 weights: cache-sized)"
    blocked = BlockedMatmul()
    timed = ""
    if choice != "1":
        plain_ms, blocked_ms, sampled = _time_both(blocked, [m["weight"] for m in linears], timer)
        timed = f" ({blocked_ms:.1f} ms vs sgemm {plain_ms:.1f} ms through {sampled} weights)"
        if blocked_ms > MIN_GAIN * plain_ms:
            blocked.forget()
            return f"decode matmuls: sgemm ({plain_ms:.1f} ms vs {blocked_ms:.1f} ms in row blocks through {sampled} weights)"
    for m in linears:
        m.__class__ = _linear_class(blocked)
    for m in embeds:
        m.__class__ = _embedding_class(blocked)
    return f"decode matmuls: row blocks on two streams{timed}"


def _time_both(blocked: BlockedMatmul, weights: list[Any], timer: Callable[[], float]) -> tuple[float, float, int]:
    """Median milliseconds for 8 rows through a sample of the weights, plain and blocked, each
    matmul waiting for the one before (as in a forward pass: independent products would overlap
    the two streams' work with the next call's and flatter the blocks). The sample is larger
    than a CPU cache holds, or the whole model."""
    mx = blocked.mx
    sample, size = [], 0
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
            x = mx.zeros((8, 1, w.shape[1]), dtype=w.dtype) + y[..., :1] * 0.0
            y = matmul(x, w)
        return y

    def plain(x: Any, w: Any) -> Any:
        return x @ w.T

    def median_ms(matmul: Callable[[Any, Any], Any]) -> float:
        mx.eval(chain(matmul))  # warm: views, first calls
        times = []
        for _ in range(5):
            t0 = timer()
            mx.eval(chain(matmul))
            times.append(timer() - t0)
        return sorted(times)[len(times) // 2] * 1e3

    return median_ms(plain), median_ms(blocked), len(sample)


_classes: dict[tuple[str, int], type] = {}


def _linear_class(blocked: BlockedMatmul) -> type:
    import mlx.nn as nn

    key = ("linear", id(blocked))
    if key not in _classes:
        class BlockedLinear(nn.Linear):
            """`nn.Linear` whose decode rows go through the blocked matmul."""

            def __call__(self, x: Any) -> Any:
                w = self["weight"]
                if blocked.applies(x, w):
                    y = blocked(x, w)
                    return y + self["bias"] if "bias" in self else y
                return super().__call__(x)

        _classes[key] = BlockedLinear
    return _classes[key]


def _embedding_class(blocked: BlockedMatmul) -> type:
    import mlx.nn as nn

    key = ("embedding", id(blocked))
    if key not in _classes:
        class BlockedEmbedding(nn.Embedding):
            """A tied embedding whose output projection's decode rows go through the blocks."""

            def as_linear(self, x: Any) -> Any:
                w = self["weight"]
                return blocked(x, w) if blocked.applies(x, w) else super().as_linear(x)

        _classes[key] = BlockedEmbedding
    return _classes[key]
