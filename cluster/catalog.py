"""The model catalog on the wire: each node's store role says which models that node has (its
models dir, and the store itself on the store host); the leader replicates it, so any node's
API lists and places any model of the cluster without reading a disk."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from skulk.wire.message import Message
from skulk.wire.models import ModelCard

if TYPE_CHECKING:
    from skulk.cluster.state import State


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogReport(Message):
    """Store role -> its node's master, on the bus (every few seconds; forwarded on change)."""

    TYPE: ClassVar[str] = "event.catalog_report"
    cards: tuple[ModelCard, ...]
    in_store: bool = False  # these are the cluster's store's models (the store host's report)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeCatalogUpdated(Message):
    """Replicated: the models a node has (`in_store`: it is the store host, every node can
    stage them)."""

    TYPE: ClassVar[str] = "event.node_catalog_updated"
    node_id: str
    cards: tuple[ModelCard, ...]
    in_store: bool = False


def catalog_key(entry: NodeCatalogUpdated) -> str:
    """A node's own models and the store it hosts are separate entries of `State.catalog`."""
    return entry.node_id + ("#store" if entry.in_store else "")


def cards_of(catalog: dict[str, NodeCatalogUpdated]) -> dict[str, ModelCard]:
    """Every model of the cluster once (by id; the store's copy first)."""
    out: dict[str, ModelCard] = {}
    for entry in sorted(catalog.values(), key=lambda e: (not e.in_store, e.node_id)):
        for card in entry.cards:
            out.setdefault(card.model_id, card)
    return dict(sorted(out.items()))


def catalogs_pending(state: State, members: int) -> list[str]:
    """Who may have a model the catalog does not list yet: nodes of the state whose models
    have not been reported, and "N more" for live members (this node's gossip) the state does
    not list yet. A lookup that finds nothing is info-pending while this is not empty."""
    reported = {e.node_id for e in state.catalog.values()}
    pending = [state.nodes[n].friendly_name or n for n in sorted(state.nodes) if n not in reported]
    if members > len(state.nodes):
        pending.append(f"{members - len(state.nodes)} more")
    return pending
