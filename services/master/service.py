"""The master's process and loop; election, the reducer and routing plug into this loop."""

from __future__ import annotations

import argparse

from skulk.services.base import ServiceLoop


def setup(loop: ServiceLoop, argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="skulk.services.master")
    p.add_argument("--listen", default="0.0.0.0")
    p.add_argument("--port", type=int, required=True)
    ns = p.parse_args(argv)
    loop.status_detail = f"no election yet (command port {ns.port} not bound)"
