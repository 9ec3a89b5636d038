"""A staged copy on disk, as the worker writes it and `GET /store/storage` reads it: the layout
shared by the two roles (`<root>/<org>--<name>/` with a marker written last), and which models a
node's instances use (with their companions). No sockets; a few stats."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skulk.cluster.state import State

MARK = ".skulk-staged.json"
"""Written last into a complete copy: what was copied (and its checksums)."""
LAST_USED = ".skulk-last-used"
"""Touched when a runner starts on the copy: eviction keeps the newest-used first."""


@dataclass(frozen=True, slots=True)
class Staged:
    model_id: str
    size_bytes: int
    last_used: float  # wall clock


def is_staged(path: Path) -> bool:
    return (path / MARK).is_file() and (path / "config.json").is_file()


def model_id_of(name: str) -> str:
    """`org--name` (a directory name) -> `org/name`."""
    return name.replace("--", "/", 1)


def staged_copies(root: Path) -> list[Staged]:
    """Every complete copy under `root`, with its size and last use."""
    out = []
    for d in sorted(root.iterdir()) if root.is_dir() else ():
        if d.is_dir() and is_staged(d):
            size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
            used = max((d / n).stat().st_mtime for n in (LAST_USED, MARK) if (d / n).exists())
            out.append(Staged(model_id=model_id_of(d.name), size_bytes=size, last_used=used))
    return out


def in_use_here(state: State, node_id: str) -> set[str]:
    """The models this node's instances use, with their companions (never evicted)."""
    used: set[str] = set()
    for inst in state.instances.values():
        if node_id in inst.node_to_runner:
            used.update((inst.model_id, *inst.card.companions))
    return used


def store_url(store_host: str, http_host: str | None, port: int, state: State | None, listen: str) -> str:
    """Where the cluster's store answers: `store_http_host`, else the store node's first
    address from the state; a node listening on loopback reaches it on loopback."""
    host = http_host
    if not host and state is not None and listen not in ("127.0.0.1", "::1", "localhost"):
        node = next((n for n in state.nodes.values() if n.node_id == store_host
                     or n.friendly_name.casefold() == store_host.casefold()), None)
        host = node.addresses[0] if node and node.addresses else None
    return f"http://{host or '127.0.0.1'}:{port}"
