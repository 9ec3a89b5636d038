"""The event log's on-disk format, shared by its writer (the eventlog role) and its readers
(`GET /events`, `GET /store/storage`, tests): `events.log` holds length-prefixed msgpack
records `[wall_time, topic, payload]`; archives are gzip copies `events.<UTC stamp>.log.gz`;
`mode.json` says whether the log is writing or counting only."""

from __future__ import annotations

import gzip
import json
import struct
from collections.abc import Iterator
from pathlib import Path

import msgpack

ACTIVE = "events.log"
MODE_FILE = "mode.json"
"""`{"mode": "writing" | "counting", "reason", "since"}`, padded with spaces to a fixed size."""
MODE_FILE_BYTES = 512


def read_mode(directory: Path) -> tuple[str, str]:
    """(mode, reason) from the event log's mode file: ("", "") when it is not there or torn."""
    try:
        mode = json.loads((directory / MODE_FILE).read_bytes())
        return str(mode.get("mode", "")), str(mode.get("reason") or "")
    except (OSError, ValueError, AttributeError):
        return "", ""


def record_bytes(topic: bytes, payload: bytes, when: float) -> bytes:
    body = msgpack.packb([when, topic, payload], use_bin_type=True)
    return struct.pack(">I", len(body)) + body


def records(data: bytes) -> Iterator[tuple[float, bytes, bytes]]:
    """The whole records of a file's bytes; a torn or corrupt tail (a kill mid-write, a power
    loss) ends the iteration, never an error."""
    pos = 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack(">I", data[pos:pos + 4])
        if pos + 4 + size > len(data):
            return
        try:
            when, topic, payload = msgpack.unpackb(data[pos + 4:pos + 4 + size], raw=False)
        except Exception:  # noqa: BLE001 - msgpack raises several unrelated types on garbage
            return
        if not isinstance(topic, bytes) or not isinstance(payload, bytes):
            return
        yield float(when), topic, payload
        pos += 4 + size


MAX_RECORD_BYTES = 64 * 1024 * 1024
"""No record is larger (a frame is at most 8 MiB): a bigger length prefix is a corrupt file."""


def read_records(path: Path) -> list[tuple[float, bytes, bytes]]:
    """Every whole record of one file, plain or gzip (for tests and the writer's own trim)."""
    return list(iter_records(path))


def iter_records(path: Path) -> Iterator[tuple[float, bytes, bytes]]:
    """The whole records of one file, plain or gzip, read one at a time: a reader holds one
    record, never the file (`GET /events` read and decoded the whole active file, up to
    `event_log.ring_mb`, per request: the API worker grew by hundreds of MiB). A torn or corrupt
    tail ends the iteration."""
    try:
        fh = gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")
    except OSError:
        return
    with fh:
        while True:
            try:
                head = fh.read(4)
                if len(head) < 4:
                    return
                (size,) = struct.unpack(">I", head)
                if size > MAX_RECORD_BYTES:
                    return
                body = fh.read(size)
            except (OSError, EOFError, gzip.BadGzipFile):
                return
            if len(body) < size:
                return
            try:
                when, topic, payload = msgpack.unpackb(body, raw=False)
            except Exception:  # noqa: BLE001 - msgpack raises several unrelated types on garbage
                return
            if not isinstance(topic, bytes) or not isinstance(payload, bytes):
                return
            yield float(when), topic, payload


def log_files(directory: Path) -> list[Path]:
    """The archives oldest first, then the active file."""
    archives = sorted(directory.glob("events.*.log.gz"))
    active = directory / ACTIVE
    return [*archives, *([active] if active.exists() else [])]
