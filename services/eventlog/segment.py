"""An append-only file of length-prefixed msgpack records `[wall_time, topic, payload]`.

Bounded: past `max_bytes` the active file is rotated to `.1` (one archive). On any write
error (ENOSPC) it degrades to counting-only: events are counted, not written, and inference
is never affected (the runbook's trade).
"""

from __future__ import annotations

import logging
import struct
import time
from pathlib import Path

import msgpack

log = logging.getLogger("skulk.eventlog")


class Segment:
    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.appended = 0
        self.degraded = False
        self._fh = None
        try:
            self._fh = open(path, "ab")
        except OSError as exc:
            self._degrade(exc)

    def append(self, topic: bytes, payload: bytes) -> None:
        self.appended += 1
        if self.degraded or self._fh is None:
            return
        record = msgpack.packb([time.time(), topic, payload], use_bin_type=True)
        try:
            self._fh.write(struct.pack(">I", len(record)) + record)
            self._fh.flush()
            if self._fh.tell() > self.max_bytes:
                self._rotate()
        except OSError as exc:
            self._degrade(exc)

    def _rotate(self) -> None:
        assert self._fh is not None
        self._fh.close()
        self.path.replace(self.path.with_suffix(self.path.suffix + ".1"))
        self._fh = open(self.path, "ab")

    def _degrade(self, exc: OSError) -> None:
        self.degraded = True
        log.critical("event log degraded to counting-only mode (%s); free disk on this node",
                     exc.strerror or exc)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()


def read_records(path: Path) -> list[tuple[float, bytes, bytes]]:
    """Every record of one file (for tests and diagnostics); stops at a torn tail."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack(">I", data[pos:pos + 4])
        if pos + 4 + size > len(data):
            break
        when, topic, payload = msgpack.unpackb(data[pos + 4:pos + 4 + size], raw=False)
        out.append((when, topic, payload))
        pos += 4 + size
    return out
