"""Skulk's version, as installed (shared by the tree, which passes it to gossip, and the API)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

import msgpack


def skulk_version() -> str:
    try:
        return version("skulk")
    except PackageNotFoundError:
        return "0+unknown"


def peer_versions(raw: bytes) -> tuple[str, str, int] | None:
    """(node id, skulk version, message version) of a peer hello this build could not decode (a
    newer cluster protocol), read leniently from the raw frame; None when it is not one."""
    try:
        env: Any = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        info = env["b"]["info"]
        info = info.get("b", info) if isinstance(info, dict) else {}
        if env.get("t") != "cluster.peer_hello":
            return None
        return str(info.get("node_id", "?")), str(info.get("skulk_version", "?")), int(env.get("v", 0))
    except Exception:  # noqa: BLE001 - anything unreadable is simply not a hello we can describe
        return None


def skew_refusal(theirs: tuple[str, str, int], ours_version: str, ours_protocol: int) -> str:
    """Why a node whose hello this node cannot read is kept out, naming both versions."""
    node, version, protocol = theirs
    return (f"refused node {node}: it runs skulk {version}, whose cluster protocol (peer hello v{protocol}) "
            f"this node (skulk {ours_version}, v{ours_protocol}) cannot read; run one version on every "
            "node (upgrade this one, or roll the cluster node by node with POST /admin/restart)")
