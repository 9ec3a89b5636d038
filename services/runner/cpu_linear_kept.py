"""What `cpu_linear` measures at load, kept per machine and model for the next runner.

Whether a weight's row blocks are exact on this CPU (`exact_here`) and how their time compares
with sgemm's (`_time_both`) depend only on the machine (its CPU, cores and BLAS library), mlx,
whether the blocks run on two streams, and the model's weight shapes: about a second of every
MLX runner's start on a CPU (0.3 s checking, 0.7 s timing, 1.7 CPU-s for SmolLM2-135M's fp32
weights on a 2-core x86 VM). The first runner keeps them in the user's cache folder
(`decode-matmuls/<key>.json`, `user_cache.py`) and later runners with the same key read them
instead. Another CPU (a VM moved to another host type), BLAS, mlx or model has another key and
is measured again; a missing, torn or foreign file, or a cache folder that cannot be written, only
means measuring at every start, as without it. Delete the folder to measure again.
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
from typing import Any

from skulk.services.runner import blas
from skulk.services.runner.user_cache import cache_dir, write_atomic

log = logging.getLogger("skulk.runner")

FOLDER = "decode-matmuls"
CPU_FIELDS = ("model name", "flags", "Features", "CPU implementer", "CPU part")
"""/proc/cpuinfo's lines that name the CPU (x86: model and instruction sets; Arm: core type)."""


@dataclass(frozen=True, slots=True)
class Measured:
    """`exact_here`'s answer ("" where every row is exact) and, where it was timed, `_time_both`'s
    (sgemm ms, blocks ms, weights timed)."""

    differs: str
    timing: tuple[float, float, int] | None = None


def cpu_identity(cpuinfo: str) -> str:
    """The first processor's naming lines of /proc/cpuinfo (all cores are alike here)."""
    seen: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name in CPU_FIELDS and name not in seen:
            seen[name] = value.strip()
    return json.dumps(seen, sort_keys=True)


def _machine() -> dict[str, Any]:
    import mlx.core as mx

    try:
        cpu = cpu_identity(Path("/proc/cpuinfo").read_text())
    except OSError:  # not Linux
        cpu = platform.processor()
    library = blas.preloaded() or ""
    try:
        stat = os.stat(library) if library else None
    except OSError:
        stat = None
    return {"cpu": cpu, "arch": platform.machine(), "cores": os.cpu_count(),
            "blas": [library, stat.st_size if stat else 0, stat.st_mtime_ns if stat else 0],
            "mlx": str(getattr(mx, "__version__", ""))}


def key_of(machine: dict[str, Any], shapes: Sequence[Sequence[int]], two_streams: bool) -> str:
    """The file name the measurements of these weights on this machine are kept under."""
    what = {"machine": machine, "two_streams": two_streams, "shapes": [list(s) for s in shapes]}
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
        plain, blocked, weights = timing
        return Measured(differs, (float(plain), float(blocked), int(weights)))
    except (ValueError, KeyError, TypeError):
        return None


class Kept:
    """The measurements for one model's weights on this machine: read once, written when new."""

    def __init__(self, folder: Path | None, key: str) -> None:
        self.path = folder / FOLDER / f"{key}.json" if folder is not None else None

    @classmethod
    def for_weights(cls, shapes: Sequence[Sequence[int]], two_streams: bool) -> Kept:
        return cls(cache_dir(), key_of(_machine(), shapes, two_streams))

    def read(self) -> Measured | None:
        if self.path is None:
            return None
        try:
            return parse(self.path.read_text())
        except OSError:
            return None

    def keep(self, measured: Measured) -> None:
        if self.path is None:
            return
        body = {"differs": measured.differs, "timing": list(measured.timing) if measured.timing else None}
        try:
            write_atomic(self.path, json.dumps(body).encode())
        except OSError as exc:
            log.debug("decode-matmul measurements not kept (%s): measured again at the next start", exc)
