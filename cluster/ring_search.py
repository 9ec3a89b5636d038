"""The roomiest fitting ring of one width (pure), found in time polynomial in the nodes.

Placement takes, at the smallest width that fits, the ring with the most room in total (ties:
the larger node ids), preferring rings without a node that is restarting. A ring's nodes compute
on one kind of device and all have the engine it runs on, so the nodes are first cut into pools
(one per device kind and engine); within a pool, the best ring of a width is found without
enumerating subsets:

- **Tensor**: every node of a pool holds the same part of the weights (1/width) and needs the
  same memory for it (one device kind, one engine), so a node fits when its room is at least
  that: if the `width`-th roomiest node cannot hold its part, no ring of that width can.
- **Pipeline**: each node holds the weights in proportion to its room, so a ring fits when its
  node with the least room does, and more room in the ring makes every share smaller. The
  `width` roomiest nodes have both the most room in total and the largest smallest node of any
  ring of that width: if they do not fit, no ring of that width does.

The roomiest `width` nodes, ties to the larger ids, are also the ring an enumeration would pick
(of equal sums, the one whose sorted ids compare largest). `tests/unit/test_ring_search.py`
checks the answers against an enumeration of every subset.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from skulk.cluster import engines
from skulk.cluster.state import NodeInfo
from skulk.wire.models import EngineKind, ModelCard

Ring = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Pool:
    """Nodes of one device kind that can all run `engine` for this card, roomiest first (ties:
    the larger id first)."""

    engine: EngineKind
    nodes: tuple[str, ...]


def pools(card: ModelCard, nodes: Mapping[str, NodeInfo], by_device: Mapping[str, list[str]],
          rooms: Mapping[str, int], asked: str) -> tuple[list[Pool], list[Pool]]:
    """The pools for one node and for wider rings. One node is asked `engines.choose` itself; a
    wider ring runs an engine every one of its nodes has (llama.cpp runs on one node only, so
    the answer does not depend on the width), so its pool is the nodes that have that engine,
    and `choose` is asked of two of them to confirm it picks that engine."""
    def ordered(ids: list[str]) -> tuple[str, ...]:
        return tuple(sorted(ids, key=lambda n: (rooms[n], n), reverse=True))

    single: list[Pool] = []
    wide: list[Pool] = []
    for group in by_device.values():
        chosen: dict[EngineKind, list[str]] = {}
        for node_id in group:
            engine = engines.choose(card, [nodes[node_id]], asked)
            if not isinstance(engine, engines.Refused):
                chosen.setdefault(engine, []).append(node_id)
        single.extend(Pool(e, ordered(ns)) for e, ns in chosen.items())
        for engine in EngineKind:
            having = [n for n in group if engine in engines.node_engines(nodes[n])]
            if len(having) >= 2 and engines.choose(card, [nodes[n] for n in having[:2]], asked) == engine:
                wide.append(Pool(engine, ordered(having)))
    return single, wide


def best_in_pool(pool: Pool, width: int, avoid: frozenset[str], fits: Callable[[Ring], bool]) -> Ring | None:
    """The roomiest ring of `width` in `pool` that fits (`fits`) and touches none of `avoid`:
    its `width` roomiest nodes, or none. (Tensor: every node of a pool needs the same, so if the
    `width`-th roomiest cannot hold its part, no ring of that width can; Pipeline: see above.)"""
    free = [n for n in pool.nodes if n not in avoid] if avoid else pool.nodes
    if width == 1:  # each node on its own: the roomiest that fits
        return next(((n,) for n in free if fits((n,))), None)
    if len(free) < width:
        return None
    ring = tuple(sorted(free[:width]))
    return ring if fits(ring) else None


def total_room(ring: Ring, rooms: Mapping[str, int]) -> tuple[int, Ring]:
    """How placement ranks the rings of one width: most room, then the larger sorted ids."""
    return sum(rooms[n] for n in ring), ring
