"""The event log's files: `events.log` (length-prefixed msgpack records `[wall_time, topic,
payload]`) and gzip archives `events.<UTC stamp>.log.gz`.

At start the previous active file becomes an archive (archives pruned to their count and byte
caps, oldest first). Past `ring_bytes` the active file is compacted to its newest `ring_keep`
records (rewritten beside it, then renamed over it). Below the free-space floor, or on any
write error (ENOSPC, EIO, a read-only disk), it turns counting-only: one CRITICAL line, events
counted, not written, inference untouched; `resume_if_possible` (called by the loop's timer)
writes again once space is back and says so.
"""

from __future__ import annotations

import gzip
import json
import logging
import shutil
import time
from pathlib import Path
from typing import BinaryIO

from skulk.node.eventlog_files import ACTIVE, MODE_FILE, MODE_FILE_BYTES, read_records, record_bytes
from skulk.services.eventlog.retention import Retention, archives_to_prune, below_floor

log = logging.getLogger("skulk.eventlog")


class Segment:
    def __init__(self, directory: Path, keep: Retention) -> None:
        self.dir, self.keep = directory, keep
        self.path = directory / ACTIVE
        self.appended = 0
        self.degraded = ""  # why it is counting only ("" while writing)
        self._fh: BinaryIO | None = None
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._archive_previous()
            self._open()
        except OSError as exc:
            self._degrade(f"cannot open the event log: {exc.strerror or exc}")

    def _open(self) -> None:
        self._fh = open(self.path, "ab")
        self._write_mode()

    def append(self, topic: bytes, payload: bytes) -> None:
        self.appended += 1
        if self.degraded or self._fh is None:
            return
        try:
            if self.appended % self.keep.floor_check_every == 0 and self._below_floor():
                self._degrade(f"free disk below the {self.keep.floor_bytes / 2**30:.1f} GiB floor")
                return
            self._fh.write(record_bytes(topic, payload, time.time()))
            self._fh.flush()
            if self.appended % self.keep.ring_check_every == 0 and self._fh.tell() > self.keep.ring_bytes:
                self._compact()
        except OSError as exc:
            self._degrade(exc.strerror or str(exc))

    def _below_floor(self) -> bool:
        return below_floor(shutil.disk_usage(self.dir).free, self.keep)

    def _compact(self) -> None:
        """Keep the newest `ring_keep` records (rewritten beside, then renamed over)."""
        assert self._fh is not None
        self._fh.close()
        kept = read_records(self.path)[-self.keep.ring_keep:]
        tmp = self.path.with_suffix(".compact")
        with open(tmp, "wb") as out:
            for when, topic, payload in kept:
                out.write(record_bytes(topic, payload, when))
        tmp.replace(self.path)
        self._fh = open(self.path, "ab")
        log.info("event log compacted to its newest %d events", len(kept))

    def _archive_previous(self) -> None:
        if self.path.exists() and self.path.stat().st_size > 0:
            now = time.time()  # to the microsecond: two starts within a second keep both archives
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
            target = self.dir / f"events.{stamp}.log.gz"
            with open(self.path, "rb") as src, gzip.open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            self.path.unlink()
        archives = [(p.name, p.stat().st_size) for p in sorted(self.dir.glob("events.*.log.gz"))]
        for name in archives_to_prune(archives, self.keep):
            (self.dir / name).unlink(missing_ok=True)

    def _degrade(self, why: str) -> None:
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass
            self._fh = None
        self.degraded = why
        log.critical("event log in counting-only mode (%s): events are counted, not written; "
                     "inference is not affected; free disk on this node", why)
        self._write_mode()

    def resume_if_possible(self) -> None:
        """Counting-only and the disk has room again: write again (and say so)."""
        if not self.degraded:
            return
        try:
            if self._below_floor():
                return
            self.degraded = ""
            self._open()
        except OSError as exc:
            self.degraded = exc.strerror or str(exc)
            return
        log.warning("event log persistence resumed (free disk above the floor again)")

    def _write_mode(self) -> None:
        """The mode file is rewritten in place at a fixed size, so saying "counting" needs no new
        disk block on the very disk that is full (a new file could not be written there)."""
        reason = self.degraded
        while True:  # the reason shrinks until the JSON fits (escapes can make it longer)
            data = json.dumps({"mode": "counting" if self.degraded else "writing", "reason": reason or None,
                               "since": round(time.time(), 3)}).encode()
            if len(data) <= MODE_FILE_BYTES:
                break
            reason = reason[:len(reason) // 2]
        data = data.ljust(MODE_FILE_BYTES)
        path = self.dir / MODE_FILE
        try:
            with open(path, "r+b" if path.exists() else "wb") as fh:
                fh.write(data)
                fh.truncate(MODE_FILE_BYTES)  # an older, longer file keeps no tail
        except OSError:
            pass  # cannot even rewrite it: it says what it said before

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
