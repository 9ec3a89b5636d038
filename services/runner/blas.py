"""Load Debian's OpenBLAS before mlx is imported: the Linux CPU fast path.

mlx-cpu bundles the reference BLAS (about 5 GFLOP/s); with OpenBLAS loaded globally first and
the model in fp32, decode is about 3x and prefill about 19x faster (docs/operations.md, "CPU
speed on Linux"). The runner logs which path it took.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from collections.abc import Collection, Sequence
from pathlib import Path

log = logging.getLogger("skulk.runner")

OPENBLAS_PATHS = ("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
                  "/usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3")


_preloaded: list[str | None] = []
"""What this process preloaded, once: a standby runner (`supervisor/zygote.py`) preloads before it
imports mlx, and the runner it becomes asks again."""
_library: list[ctypes.CDLL] = []
"""The preloaded OpenBLAS's handle (`set_threads` calls into it)."""


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
                _library.append(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL))
                found = path
                break
            except OSError as exc:
                log.warning("could not preload %s: %s", path, exc)
    _preloaded.append(found)
    return found


def preloaded() -> str | None:
    """The OpenBLAS this process preloaded (`preload_blas`), or None."""
    return _preloaded[0] if _preloaded else None


def identity() -> str:
    """Which BLAS computes this process's matmuls: the preloaded OpenBLAS's build and the kernel
    it chose for this CPU (`OPENBLAS_CORETYPE` may force another), or "" without one."""
    if not _library:
        return ""
    parts = [_preloaded[0] or ""]
    for name in ("openblas_get_config", "openblas_get_corename"):
        try:
            fn = getattr(_library[0], name)
            fn.restype = ctypes.c_char_p
            parts.append((fn() or b"").decode(errors="replace"))
        except AttributeError:  # another BLAS under OpenBLAS's name
            parts.append("")
    return " | ".join(parts)


def threads_beside_ranks(cores: int, hosts: Sequence[str], rank: int, here: Collection[str],
                         given: int) -> int | None:
    """OpenBLAS threads for rank `rank` of a sharded instance whose other ranks may share this
    machine (several nodes on one machine): its cores split evenly among the ranks on it, since
    OpenBLAS's threads spin while they wait, and two ranks each spinning on every core starve
    each other (8 rows a step over a tensor ring on 2 cores: 6x slower). `hosts` are the ring's
    `host:port` addresses (a rank is here when its host is one of this machine's addresses,
    `here`, or is written as this rank's own is), `given` the node environment's
    `OPENBLAS_NUM_THREADS` (0 if unset): an operator's number is kept. None: leave OpenBLAS be."""
    if given > 0:
        return None
    mine = host_of(hosts[rank])
    local = sum(1 for h in hosts if host_of(h) in here or host_of(h) == mine)
    return max(1, cores // local) if local > 1 else None


def host_of(address: str) -> str:
    """The host of `host:port`, `[v6]:port` or an unbracketed `v6:port`, without a `%zone`."""
    return address.rpartition(":")[0].strip("[]").split("%", 1)[0]


def set_threads(n: int) -> bool:
    """`openblas_set_num_threads(n)` on the preloaded OpenBLAS; call it before the first matmul
    (mlx may run one on its own thread later). False where OpenBLAS was not preloaded."""
    if not _library:
        return False
    try:
        _library[0].openblas_set_num_threads(ctypes.c_int(n))
    except AttributeError:
        return False
    return True


def usable_cores() -> int:
    """The cores this process may run on (its affinity: a container or `taskset` may give it
    fewer than the machine has)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
