"""`skulk model add <org/name | dir | file.gguf>`: put a model into the store, or the node's models dir.

Where it goes: `--store-path`, else the node's `model_store.store_path` (run it on the store
host), else `<home>/models`. A directory is copied, a GGUF file (or a directory holding one) is
imported (`node/gguf_import.py`), an `org/name` is fetched from Hugging Face with progress
bars; all land atomically and are checked (`node/model_import.py`). Any
failure is one line naming the model and the reason, and a non-zero exit, at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from skulk.node import exitcodes


def destination(home: Path, store_path: Path | None, config_path: Path | None) -> Path:
    """The directory models are added to (ConfigError when the node's config is bad)."""
    if store_path is not None:
        return store_path.expanduser().resolve()
    from skulk.node import config

    cfg = config.load(home=home, config_path=config_path)
    store = getattr(cfg, "model_store", None)
    if store is not None and getattr(store, "enabled", True):
        return Path(store.store_path)
    return cfg.home / "models"


def is_model_id(text: str) -> bool:
    org, sep, name = text.partition("/")
    return bool(sep and org and name and "/" not in name and not text.startswith((".", "~")))


def run(ns: argparse.Namespace, home: Path) -> int:
    from skulk.node.config import ConfigError
    from skulk.node.model_import import FetchError, add_gguf, add_local_dir, download_into_store, gguf_file

    try:
        dest = destination(home, ns.store_path, ns.config)
    except ConfigError as exc:
        print(f"skulk: configuration error: {exc}", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    source = Path(ns.source).expanduser()
    try:
        if (gguf := gguf_file(source)) is not None:
            print(f"importing {gguf} ({gguf.stat().st_size / 2**20:.1f} MiB) into {dest}", file=sys.stderr, flush=True)
            result = add_gguf(gguf, dest, model_id=ns.model_id, force=ns.force)
        elif source.is_dir():
            result = add_local_dir(source, dest, model_id=ns.model_id, force=ns.force)
        elif is_model_id(ns.source):
            def announce(total: int) -> None:
                print(f"fetching {ns.source} ({total / 2**20:.1f} MiB) from Hugging Face into {dest}",
                      file=sys.stderr, flush=True)

            result = download_into_store(ns.source, dest, allow_hf_fallback=True, force=ns.force,
                                         on_total=announce, timeout_s=ns.timeout)
        else:
            print(f"skulk: {ns.source}: not a model directory, a .gguf file or a model id of the form "
                  "org/name", file=sys.stderr)
            return 2
    except FetchError as exc:
        print(f"skulk: {exc}", file=sys.stderr)
        return 1
    verb = "already in" if result.source == "present" else "added to"
    print(f"{result.model_id} {verb} {result.directory} "
          f"({result.files} files, {result.total_bytes / 2**20:.1f} MiB)")
    return 0


def add_parser(model_sub: argparse._SubParsersAction[argparse.ArgumentParser],
               handler: Callable[[argparse.Namespace], int]) -> None:
    add = model_sub.add_parser("add", help="add a model (a local directory, a GGUF file, or org/name "
                               "from Hugging Face) to the store, or to the node's models dir")
    add.add_argument("source", help="a model directory, a .gguf file (or a directory holding one), "
                     "or a Hugging Face id org/name")
    add.add_argument("--home")
    add.add_argument("--config", type=Path, help="skulk.yaml (default <home>/skulk.yaml)")
    add.add_argument("--store-path", type=Path, help="add here (default: the node's "
                     "model_store.store_path, else <home>/models)")
    add.add_argument("--model-id", "--id", help="the model's id, org/name (default: a directory's "
                     "name org--name as org/name, else local/<name>; a GGUF file's local/<file name>)")
    add.add_argument("--force", action="store_true", help="replace a model already there")
    add.add_argument("--timeout", type=float, default=10.0,
                     help="seconds to wait for Hugging Face to answer before giving up")
    add.set_defaults(func=handler)
