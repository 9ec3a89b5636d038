"""Logging for every Skulk process: human-readable stderr plus a rotated per-process file."""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path

FILE_BYTES = 10 * 1024 * 1024
FILE_BACKUPS = 3


def setup(name: str, log_dir: Path | None, level: int = logging.INFO) -> None:
    """`[12:00:00.123 | INFO     | gossip:4242] message` on stderr and in `<log_dir>/<name>.log`."""
    fmt = logging.Formatter(f"[%(asctime)s.%(msecs)03d | %(levelname)-8s | {name}:{os.getpid()}] "
                            "%(message)s", datefmt="%H:%M:%S")
    root = logging.getLogger()
    root.handlers.clear()
    root.setLevel(level)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(fmt)
    root.addHandler(stderr)
    if log_dir is not None:
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            handler = logging.handlers.RotatingFileHandler(
                log_dir / f"{name}.log", maxBytes=FILE_BYTES, backupCount=FILE_BACKUPS)
            handler.setFormatter(fmt)
            root.addHandler(handler)
        except OSError as exc:  # a full or read-only disk must not stop the node
            root.warning("file logging disabled for %s: %s", name, exc)
