"""Which engines this node's runners can use, read without importing them (the gossip role
reports it in `NodeInfo.engines`; placement chooses among them, `cluster/engines.py`).

MLX is always there (it is a dependency). llama.cpp is there when its binding is installed
(`make setup` builds it); `runner.engine: mlx` or `llama_cpp` narrows the node to one.
"""

from __future__ import annotations

import importlib.util
from functools import cache

from skulk.wire.models import EngineKind


@cache
def installed() -> tuple[str, ...]:
    """The engines whose packages this Python can import (looked up once per process)."""
    found = [EngineKind.MLX.value]
    if importlib.util.find_spec("llama_cpp") is not None:
        found.append(EngineKind.LLAMA_CPP.value)
    return tuple(found)


def engines_here(configured: str = "auto") -> tuple[str, ...]:
    """What this node offers: every engine installed, or the one `runner.engine` names; where
    that one is not installed, nothing it could run (placement then says it is not available
    here rather than falling back to another)."""
    if configured in ("", "auto"):
        return installed()
    return (configured,) if configured in installed() else (f"{configured} (not installed)",)
