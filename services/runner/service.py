"""Runner process lifecycle under the runners sub-supervisor.

Today a runner boots, reports ready and heartbeats from its loop, so the dynamic
(simple_one_for_one) supervision works end to end; loading an MLX model and serving
generate requests on its ROUTER is the inference work that comes next.
"""

from __future__ import annotations

import argparse

from skulk.services.base import ServiceLoop


def setup(loop: ServiceLoop, argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="skulk.services.runner")
    p.add_argument("--instance", default="")
    p.add_argument("--rank", type=int, default=0)
    ns, _ = p.parse_known_args(argv)
    loop.status_detail = f"instance {ns.instance or '-'} rank {ns.rank}: no model loaded"
