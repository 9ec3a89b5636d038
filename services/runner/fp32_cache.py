"""The fp32 copy of a quantized model, made once and kept beside it, for CPU runners.

On the CPU a runner dequantizes a quantized checkpoint and runs fp32 (`ring.load_model`): for
the 135M SmolLM2 that computation took 3.3 s of every start (2.6 s of them evaluating the
dequantized weights), more than the rest of the load. The result depends only on the stored
weights and mlx, so the first runner to compute it keeps it (`<model dir>/.skulk-fp32/`,
written to a temporary name and renamed: runners sharing the directory never read half a file)
and later ones load it instead; the weights are bit for bit what the computation gives. The
key names every weight file's size and modification time and mlx's version: a changed
checkpoint or mlx computes a new copy. A directory the runner cannot write keeps working as
before (computed at every start), and says why once.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger("skulk.runner")

CACHE_DIR = ".skulk-fp32"
WEIGHTS = "model.safetensors"
KEY = "key.json"


def key(model_dir: Path) -> dict[str, Any]:
    """What the copy was made from: every stored weight file and mlx's version."""
    import mlx.core as mx

    files = {p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(model_dir.glob("*.safetensors"))}
    return {"mlx": str(getattr(mx, "__version__", "")), "files": files}


def load(model_dir: Path, model: Any) -> bool:
    """Put the kept fp32 weights into `model` (already dequantized, lazily: its computation is
    then never run); False when there is no copy for these weights."""
    import mlx.core as mx

    where = model_dir / CACHE_DIR
    try:
        if json.loads((where / KEY).read_text()) != key(model_dir):
            return False
        weights = mx.load(str(where / WEIGHTS))
        if not isinstance(weights, dict):
            return False
        model.load_weights(list(weights.items()), strict=True)  # checks every name and shape first
    except (OSError, ValueError, RuntimeError):  # none, torn, or another model's: computed instead
        return False
    return True


def save(model_dir: Path, model: Any) -> None:
    """Keep `model`'s evaluated fp32 weights for the next start (best effort)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    where = model_dir / CACHE_DIR
    tmp = ""
    try:
        where.mkdir(exist_ok=True)
        (where / KEY).unlink(missing_ok=True)  # no key while the weights change: never a stale pair
        weights = dict(tree_flatten(model.parameters()))
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".", suffix=".safetensors")
        os.close(fd)
        mx.save_safetensors(tmp, weights)
        os.replace(tmp, where / WEIGHTS)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(key(model_dir), f)
        os.replace(tmp, where / KEY)
    except (OSError, RuntimeError, ValueError) as exc:  # a read-only directory, a full disk
        log.warning("the fp32 copy of %s is not kept (%s): it is computed at every start", model_dir.name, exc)
        if tmp:
            Path(tmp).unlink(missing_ok=True)
