"""What a master brings to its boot: the leader's state kept across an in-place restart
(written at an orderly stop, read once at boot and removed, used only when it is this node's
own and recent: `carried_over`), and the placements asked for by `skulk run --place`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from skulk.cluster.catalog import cards_of
from skulk.cluster.state import State
from skulk.services.master.replication import carried_over
from skulk.wire.codec import decode, encode
from skulk.wire.commands import PlaceInstance
from skulk.wire.errors import WireError

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


def boot_placements(state: State, node_id: str, model_ids: list[str],
                    new_id: Callable[[], str]) -> tuple[list[PlaceInstance], list[str]]:
    """The placements `skulk run --place` asks for at boot, from the replicated catalog, and
    the models still waiting for it (this node's own models are in it once its store role
    reported them: until then they wait; a model that is then still unknown is given up)."""
    cards = cards_of(state.catalog)
    reported = node_id in state.catalog
    made, left = [], []
    for model_id in model_ids:
        if any(i.model_id == model_id for i in state.instances.values()):
            log.info("--place %s: already placed", model_id)
        elif model_id in cards:
            made.append(PlaceInstance(command_id=new_id(), card=cards[model_id]))
        elif reported:
            log.error("--place %s: no node of the cluster and no model store has it", model_id)
        else:
            left.append(model_id)
    return made, left
