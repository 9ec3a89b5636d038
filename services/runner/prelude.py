"""What a runner process does before it imports its engine: its own entry point runs it, and a
standby runner (`supervisor/zygote.py`) before it imports the engine's stack.

OpenBLAS is loaded globally before mlx (`blas.py`), and transformers' index of its model classes
is read from the cache instead of rebuilt from its sources (`transformers_index.py`).
"""

from __future__ import annotations

from skulk.services.runner import transformers_index
from skulk.services.runner.blas import preload_blas


def prepare() -> str | None:
    """Both, once per process; the OpenBLAS path loaded, or None (`blas.preload_blas`)."""
    transformers_index.install()
    return preload_blas()
