"""The leader's state kept across an in-place restart: written at an orderly stop, read once
at boot (and removed), used only when it is this node's own and recent (`carried_over`)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from skulk.services.master.replication import carried_over
from skulk.wire.codec import decode, encode
from skulk.wire.errors import WireError
from skulk.wire.state import State

log = logging.getLogger("skulk.master")


def save(path: Path, state: State) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(encode(state))
    tmp.replace(path)


def load(path: Path, node_id: str) -> State | None:
    try:
        raw, age = path.read_bytes(), time.time() - path.stat().st_mtime
        path.unlink()
    except OSError:
        return None
    try:
        saved = decode(raw)
    except WireError as exc:
        log.warning("ignoring an unreadable saved state: %s", exc)
        return None
    carried = carried_over(saved, node_id, age) if isinstance(saved, State) else None
    if carried is not None:
        log.info("restarted in place: carrying over %d instance(s)", len(carried.instances))
    return carried
