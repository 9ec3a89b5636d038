"""Benchmark: the leader's placement decision on simulated clusters of 8 to 128 nodes.

    python -m tools.bench_place_decision [--sizes 8,16,32,64,128] [--repeats 5]

`cluster.placement.place` on a replicated state of N CPU nodes (varied free memory), for four
models: one that fits any node (width 1), one that needs a quarter of the nodes split by layers
(Pipeline), one split by heads over two nodes (Tensor), and one that fits nowhere (every width
is tried and refused: the slowest case). Also the API's `/instance/previews` work for the
first model (a placement per sharding, meta and width). Prints the median time of each; it
asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

from skulk.cluster.placement import GIB, PlacementError, place
from skulk.cluster.previews import previews
from skulk.cluster.state import NodeInfo, State
from skulk.wire.commands import PlaceInstance
from skulk.wire.models import ModelCard

T = TypeVar("T")


def cluster(n: int) -> State:
    nodes = {}
    for i in range(n):
        node_id = f"{i:04x}" + "0" * 28
        nodes[node_id] = NodeInfo(node_id=node_id, friendly_name=f"node-{i}", skulk_version="bench",
                                  ram_total=64 * GIB, ram_available=(16 + 8 * (i % 5)) * GIB, when=0.0)
    return State(session="bench", nodes=nodes)


def card(gib: float, model_id: str) -> ModelCard:
    return ModelCard(model_id=model_id, storage_size_bytes=int(gib * GIB), n_layers=80, hidden_size=8192,
                     num_key_value_heads=8, supports_tensor=True, context_length=8192, family="llama",
                     quantization="")


def timed(fn: Callable[[], T], repeats: int) -> tuple[float, T]:
    times: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def all_previews(state: State, model: ModelCard) -> int:
    return sum(1 for _ in previews(state, model, (), _ids()))


def _ids() -> Callable[[], str]:
    count = itertools.count()
    return lambda: f"{next(count):032x}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="8,16,32,64,128")
    p.add_argument("--repeats", type=int, default=5)
    ns = p.parse_args()
    print(f"ms, median of {ns.repeats}: nodes | fits one node | Pipeline over N/4 | Tensor over 2 | "
          "fits nowhere | previews")
    for n in (int(x) for x in ns.sizes.split(",")):
        state = cluster(n)
        row = []
        for model, sharding in ((card(8, "o/small"), "Pipeline"), (card(40 * max(1, n // 4), "o/big"), "Pipeline"),
                                (card(40, "o/wide"), "Tensor"), (card(100_000, "o/huge"), "Pipeline")):
            cmd = PlaceInstance(command_id="c", card=model, sharding=sharding)
            took, result = timed(functools.partial(place, state, cmd, _ids()), ns.repeats)
            width = "refused" if isinstance(result, PlacementError) else f"{len(result.node_to_runner)} node(s)"
            row.append(f"{took * 1000:.2f} ({width})")
        took, _ = timed(functools.partial(all_previews, state, card(8, "o/small")), ns.repeats)
        print(f"{n:>5} " + " | ".join(row) + f" | {took * 1000:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
