"""Load Debian's OpenBLAS before mlx is imported: the Linux CPU fast path.

mlx-cpu bundles the reference BLAS (about 5 GFLOP/s); with OpenBLAS loaded globally first and
the model in fp32, decode is about 3x and prefill about 19x faster (docs/operations.md, "CPU
speed on Linux"). The runner logs which path it took.
"""

from __future__ import annotations

import ctypes
import logging
import sys
from pathlib import Path

log = logging.getLogger("skulk.runner")

OPENBLAS_PATHS = ("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
                  "/usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3")


_preloaded: list[str | None] = []
"""What this process preloaded, once: a standby runner (`supervisor/zygote.py`) preloads before it
imports mlx, and the runner it becomes asks again."""


def preload_blas() -> str | None:
    """Load OpenBLAS globally before mlx is imported (Linux CPU fast path); its path, or None."""
    if _preloaded:
        return _preloaded[0]
    if not sys.platform.startswith("linux") or "mlx.core" in sys.modules:
        return None
    found = None
    for path in OPENBLAS_PATHS:
        if Path(path).exists():
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                found = path
                break
            except OSError as exc:
                log.warning("could not preload %s: %s", path, exc)
    _preloaded.append(found)
    return found
