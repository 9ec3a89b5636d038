"""Skulk's version, as installed (shared by the tree, which passes it to gossip, and the API)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def skulk_version() -> str:
    try:
        return version("skulk")
    except PackageNotFoundError:
        return "0+unknown"
