"""Benchmark: a fleet of real nodes on this machine, 4, 8 and 12 by default.

    python -m tools.bench_fleet [--sizes 4,8,12] [--idle 10]

Per size, N nodes start together as a user starts them (each its own home and ports, no names,
the first as everyone's bootstrap peer) with the demo model in their models dirs, and it prints:
formation (every node's `/state` lists N nodes under one master), the idle cluster's CPU and RSS
per node (every process of the node, over `--idle` seconds), gossip's traffic per node (the
bytes its gossip process read and wrote through system calls over that window, sockets and
logs alike: Linux's /proc io counters), the time from `POST /place_instance` to the instance
serving, and the time from SIGKILL of the node serving it to the instance placed again on
another node and serving (`placement.replace_lost_after_s` is 2 s of that). Waits are on real
signals (each re-check follows a change of a node's `/state`). It asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from skulk.scripts.http_client import request, wait_for_state
from tools.bench_formation import formed
from tools.bench_nodes import BenchNode

MODEL = "skulk/demo-tiny"


def wait(node: BenchNode, what: str, check: Callable[[dict[str, Any]], Any], limit_s: float) -> Any:
    """`check(state)` once truthy, re-checked on every change of `node`'s state (or 5 s)."""
    try:
        return wait_for_state(node.url, check, limit_s)
    except TimeoutError:
        raise TimeoutError(f"{what}: not within {limit_s:.0f}s") from None


def processes(node: BenchNode) -> list[psutil.Process]:
    if node.proc is None:
        return []
    try:
        root = psutil.Process(node.proc.pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def title(proc: psutil.Process) -> str:
    try:
        return " ".join(part for part in proc.cmdline() if part)
    except psutil.Error:
        return ""


def idle_figures(nodes: list[BenchNode], window_s: float) -> dict[str, float]:
    """CPU (% of one core) and RSS (MiB) per node, gossip bytes/s per node, over the window."""
    procs = {id(n): processes(n) for n in nodes}
    gossip = [p for ps in procs.values() for p in ps if title(p).startswith("skulk: gossip")]

    def io(p: psutil.Process) -> int:
        try:
            c = p.io_counters()
            return int(c.read_chars + c.write_chars)
        except (psutil.Error, AttributeError):
            return 0

    for ps in procs.values():
        for p in ps:
            try:
                p.cpu_percent(None)
            except psutil.Error:
                pass
    io0 = sum(io(p) for p in gossip)
    time.sleep(window_s)  # the measured window itself (nothing to wait for: the cluster idles)
    io1 = sum(io(p) for p in gossip)
    cpu, rss = [], []
    for ps in procs.values():
        c = r = 0.0
        for p in ps:
            try:
                c += p.cpu_percent(None)
                r += p.memory_info().rss
            except psutil.Error:
                pass
        cpu.append(c)
        rss.append(r / 2 ** 20)
    return {"idle CPU per node (% of a core)": statistics.mean(cpu), "RSS per node (MiB)": statistics.mean(rss),
            "gossip bytes/s per node": (io1 - io0) / window_s / max(1, len(gossip))}


def serving_on(state: dict[str, Any], exclude: str = "") -> str | None:
    """The node id serving the model (every runner ready), other than `exclude`."""
    for inst in state.get("instances", {}).values():
        shards = next(iter(inst.values()))["shardAssignments"]
        runners = shards["nodeToRunner"]
        ready = all(any(k in state["runners"].get(r, {}) for k in ("RunnerReady", "RunnerRunning"))
                    for r in runners.values())
        if ready and not set(runners) & {exclude}:
            return next(iter(runners))
    return None


def one_size(root: Path, n: int, model_dir: Path, idle_s: float) -> dict[str, float]:
    nodes = [BenchNode(root / f"fleet{n}", f"node{k}", model_dir) for k in range(n)]
    namespace = f"bench-fleet-{os.getpid()}-{n}"
    out: dict[str, float] = {}
    try:
        t0 = time.monotonic()
        for node in nodes:
            node.launch(namespace, nodes[0] if node is not nodes[0] else None)
        nodes[0].wait_booted(300)  # its API listens: `/state` can be asked from now on
        wait(nodes[0], f"{n} nodes formed", lambda _s: formed(nodes), 300)
        out["formed (s)"] = time.monotonic() - t0
        out |= idle_figures(nodes, idle_s)
        ids = {request(f"{node.url}/node_id"): node for node in nodes}
        t0 = time.monotonic()
        reply = request(f"{nodes[0].url}/place_instance", {"model_id": MODEL})
        host = wait(nodes[0], "the instance serving", serving_on, 120)
        out["place -> serving (s)"] = time.monotonic() - t0
        victim = ids[host]
        watcher = next(node for node in nodes if node is not victim)
        t0 = time.monotonic()
        victim.kill()
        wait(watcher, "serving again elsewhere", lambda s: serving_on(s, exclude=host), 120)
        out["node kill -> serving elsewhere (s)"] = time.monotonic() - t0
        assert reply
        return out
    finally:
        for node in nodes:
            node.kill()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="4,8,12")
    p.add_argument("--idle", type=float, default=10.0)
    ns = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="skulk-bench-fleet-"))
    try:
        from skulk.scripts.demo_model import build

        model_dir = build(root / "shared")
        rows = {}
        for n in (int(x) for x in ns.sizes.split(",")):
            rows[n] = one_size(root, n, model_dir, ns.idle)
            print(f"{n} nodes: " + ", ".join(f"{k} {v:.2f}" for k, v in rows[n].items()), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    keys = list(next(iter(rows.values())))
    print("| nodes | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for n, row in rows.items():
        print(f"| {n} | " + " | ".join(f"{row[k]:.1f}" for k in keys) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
