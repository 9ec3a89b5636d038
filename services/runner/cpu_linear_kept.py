"""What `cpu_linear` measures at load, kept per machine and model for the next runner.

Whether the row blocks of weights of given shapes are exact on this CPU (`exact_here`) and how
their time compares with sgemm's (`_time_both`) depend on the machine (its CPU, the cores this
process may use, the BLAS build and the kernel it picked), mlx, the thread layout (one or two
streams, OpenBLAS's threads), the weights' shapes and `cpu_linear`'s own code (its block layout):
about a second of every MLX runner's start on a CPU (1.3 s, 1.7 CPU-s, for SmolLM2-135M's fp32
weights on a 2-core x86 VM). The first runner keeps them in the user's cache folder
(`decode-matmuls/<key>.json`, `user_cache.py`) and later runners with the same key read them
instead. Anything else in the key is measured again; a missing, torn or foreign file, or a cache
folder that cannot be written, only means measuring at every start, as without it.

The timing is kept as the first start measured it: a start on a busy machine may have timed the
slower way faster (the choice is between two exact paths, so only speed is at stake). Delete the
folder to measure again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from skulk.services.runner import blas
from skulk.services.runner.user_cache import cache_dir, write_atomic

log = logging.getLogger("skulk.runner")

FOLDER = "decode-matmuls"
CPU_FIELDS = ("model name", "flags", "Features", "CPU implementer", "CPU part")
"""/proc/cpuinfo's lines that name the CPU (x86: model and instruction sets; Arm: core type)."""


class Timing(NamedTuple):
    """Milliseconds for 8 rows through a sample of the weights, each way (`_time_both`)."""

    sgemm_ms: float
    blocks_ms: float
    weights: int


@dataclass(frozen=True, slots=True)
class Measured:
    """`exact_here`'s answer ("" where every row is exact) and, where it was timed, both ways'
    times."""

    differs: str
    timing: Timing | None = None


def cpu_identity(cpuinfo: str) -> str:
    """The first processor's naming lines of /proc/cpuinfo (all cores are alike here)."""
    seen: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name in CPU_FIELDS and name not in seen:
            seen[name] = value.strip()
    return json.dumps(seen, sort_keys=True)


def machine() -> dict[str, Any]:
    """What the measurements depend on outside the model: CPU, cores, BLAS, threads, mlx."""
    import mlx.core as mx

    try:
        cpu = cpu_identity(Path("/proc/cpuinfo").read_text())
    except (OSError, ValueError):  # not Linux
        cpu = platform.processor()
    return {"cpu": cpu, "arch": platform.machine(), "cores": os.cpu_count(), "usable": blas.usable_cores(),
            "blas": blas.identity(), "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", ""),
            "mlx": str(getattr(mx, "__version__", ""))}


def key_of(machine: dict[str, Any], shapes: Sequence[Sequence[int]], two_streams: bool, code: str) -> str:
    """The file name the measurements of these weights on this machine are kept under."""
    what = {"machine": machine, "two_streams": two_streams, "shapes": [list(s) for s in shapes], "code": code}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:32]


def parse(text: str) -> Measured | None:
    """A kept file's measurements, or None where it is not one (torn, foreign, another format)."""
    try:
        raw = json.loads(text)
        differs, timing = raw["differs"], raw["timing"]
        if not isinstance(differs, str):
            return None
        if timing is None:
            return Measured(differs)
        sgemm, blocks, weights = timing
        return Measured(differs, Timing(float(sgemm), float(blocks), int(weights)))
    except (ValueError, KeyError, TypeError):
        return None


class Kept:
    """The measurements for one model's weights on this machine: read once, written when new."""

    def __init__(self, folder: Path | None, key: str) -> None:
        self.path = folder / FOLDER / f"{key}.json" if folder is not None else None

    @classmethod
    def for_weights(cls, shapes: Sequence[Sequence[int]], two_streams: bool, code: str) -> Kept:
        return cls(cache_dir(), key_of(machine(), shapes, two_streams, code))

    def read(self) -> Measured | None:
        if self.path is None:
            return None
        try:
            return parse(self.path.read_text())
        except (OSError, ValueError):  # none yet, unreadable, not text
            return None

    def keep(self, measured: Measured) -> None:
        if self.path is None:
            return
        body = {"differs": measured.differs, "timing": list(measured.timing) if measured.timing else None}
        try:
            write_atomic(self.path, json.dumps(body).encode())
        except OSError as exc:
            log.info("decode-matmul measurements not kept in %s (%s): measured again at every start",
                     self.path.parent, exc)
