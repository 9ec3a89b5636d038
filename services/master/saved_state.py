"""What a master brings to its boot: the leader's state kept across an in-place restart
(written at an orderly stop, read once at boot and removed, used only when it is this node's
own and recent: `carried_over`), and the placements asked for by `skulk run --place`."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

from skulk.services.master.replication import carried_over
from skulk.wire.codec import decode, encode
from skulk.wire.commands import PlaceInstance
from skulk.wire.models import ModelDirError, card_from_dir, dir_name
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


def boot_placements(state: State, models_dir: Path, model_ids: list[str]) -> list[PlaceInstance]:
    """The placements `skulk run --place` asks for at boot (those that can and must be made)."""
    return [cmd for m in model_ids if (cmd := boot_placement(state, models_dir, m)) is not None]


def boot_placement(state: State, models_dir: Path, model_id: str) -> PlaceInstance | None:
    """`--place MODEL`: the placement to make (from the local models dir), or None when the
    model is already placed (an instance carried over an in-place restart) or cannot be."""
    if any(i.model_id == model_id for i in state.instances.values()):
        log.info("--place %s: already placed", model_id)
        return None
    try:
        card = card_from_dir(models_dir / dir_name(model_id))
    except ModelDirError as exc:
        log.error("--place %s: %s", model_id, exc)
        return None
    return PlaceInstance(command_id=uuid.uuid4().hex, card=card)
