"""Logging for every Skulk process: human-readable stderr plus a rotated per-process file,
and, with `logging.enabled`, one JSON object per line on stdout for a shipper (Vector).

Every child gets the same settings as arguments (`--log-*`, `role_args.ChildArgs`), so no
child reads the YAML or the environment for them.
"""

from __future__ import annotations

import datetime
import json
import logging
import logging.handlers
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from skulk.node import logctx

FILE_MB = 10
FILE_BACKUPS = 5


@dataclass(frozen=True, slots=True)
class LogSettings:
    json: bool = False
    node: str = ""
    file_mb: int = FILE_MB
    files: int = FILE_BACKUPS


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (ISO 8601 UTC, ms), level, node, role, pid, logger,
    message, the bound request ids, and an exception's traceback as a string."""

    def __init__(self, node: str, role: str) -> None:
        super().__init__()
        self.node, self.role = node, role

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        line: dict[str, object] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname, "node": self.node, "role": self.role, "pid": record.process,
            "logger": record.name, "message": record.getMessage()}
        line.update(logctx.current())
        for key in ("task_id", "command_id"):  # `extra=` on the call wins over the context
            if isinstance(value := getattr(record, key, None), str) and value:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(line, ensure_ascii=False, default=str)


def setup(name: str, log_dir: Path | None, level: int = logging.INFO,
          settings: LogSettings | None = None) -> None:
    """`[12:00:00.123 | INFO     | gossip:4242] message` on stderr and in `<log_dir>/<name>.log`
    (rotated by size, a bounded count kept); JSON lines on stdout too when `settings.json`."""
    settings = settings or LogSettings()
    fmt = logging.Formatter(f"[%(asctime)s.%(msecs)03d | %(levelname)-8s | {name}:{os.getpid()}] "
                            "%(message)s", datefmt="%H:%M:%S")
    root = logging.getLogger()
    for old in root.handlers:  # set up again (the node's name known): let go of the old file
        old.close()
    root.handlers.clear()
    root.setLevel(level)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(fmt)
    root.addHandler(stderr)
    if settings.json:
        stdout = logging.StreamHandler(sys.stdout)
        stdout.setFormatter(JsonFormatter(settings.node, name))
        root.addHandler(stdout)
    if log_dir is not None:
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            handler = logging.handlers.RotatingFileHandler(
                log_dir / f"{name}.log", maxBytes=settings.file_mb * 1024 * 1024, backupCount=settings.files)
            handler.setFormatter(fmt)
            root.addHandler(handler)
        except OSError as exc:  # a full or read-only disk must not stop the node
            root.warning("file logging disabled for %s: %s", name, exc)
