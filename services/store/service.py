"""Watches the models dir and reports what it holds; staging and the LAN store come later."""

from __future__ import annotations

from pathlib import Path

from skulk.services.base import ServiceLoop

SCAN_INTERVAL_S = 10.0


def model_dirs(models: Path) -> list[str]:
    """Model directories (`<org>--<name>/` holding a config.json) under the models dir."""
    if not models.is_dir():
        return []
    return sorted(p.name for p in models.iterdir() if (p / "config.json").is_file())


def setup(loop: ServiceLoop, _argv: list[str]) -> None:
    models = loop.rt.args.home / "models"
    models.mkdir(parents=True, exist_ok=True)

    def scan() -> None:
        loop.status_detail = f"{len(model_dirs(models))} model(s) in {models}"

    scan()
    loop.every(SCAN_INTERVAL_S, scan)
