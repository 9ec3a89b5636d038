"""Every placement the cluster could make for a model (pure): what `/instance/previews` shows.

For each sharding and instance meta, the placement `place` makes at each smallest width
(`min_nodes`), each distinct width once, and the first refusal. Asked in width order, a
placement of width k answers every `min_nodes` up to k the same way, and a refusal answers
every larger one (no allowed ring of at least that width fits), so `place` is asked once per
distinct answer, not once per width.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from skulk.cluster.placement import PlacementError, place
from skulk.cluster.state import Instance, State
from skulk.wire.commands import PlaceInstance
from skulk.wire.models import ModelCard

SHARDINGS = ("Pipeline", "Tensor")
METAS = ("MlxRing", "MlxJaccl")


def previews(state: State, card: ModelCard, excluded: tuple[str, ...],
             new_id: Callable[[], str]) -> Iterator[tuple[str, str, Instance | PlacementError]]:
    """(sharding, meta, the placement or the refusal), in the order shown."""
    for sharding in SHARDINGS:
        for meta in METAS:
            width = 1
            while width <= max(1, len(state.nodes)):
                result = place(state, PlaceInstance(command_id="preview", card=card, sharding=sharding,
                                                    instance_meta=meta, min_nodes=width,
                                                    excluded_nodes=excluded), new_id)
                yield sharding, meta, result
                if isinstance(result, PlacementError):
                    break
                width = len(result.node_to_runner) + 1
