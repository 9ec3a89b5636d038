"""Benchmark: how long N nodes started together on one machine take to form one cluster.

    python -m tools.bench_formation [--nodes 3] [--rounds 3] [--named]

Each round starts N nodes at once as a user does on one machine: each its own home and ports,
no names (one host name for all; `--named` gives each its own, for a build from before nodes
given no name could share a host name), the first without peers and the others with it as
their bootstrap peer. Formed: every node's `GET /state` lists N nodes and names the same master.
Waits are on real signals: every re-check follows a message on the first node's bus (gossip
publishes membership every 0.25 s). Prints, per round and as medians, where the time went,
read from the nodes' own logs: every role of every node ready, the first membership listing
all N nodes, the last node to lead or follow, and formed as `/state` shows it; then the idle
cluster's CPU (every process of every node, over 5 s).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import zmq

from skulk.wire import endpoints
from skulk.wire.sockets import make_socket
from skulk.wire.topics import EVERY_EVENT
from tools.bench_nodes import BenchNode

LINE = re.compile(r"^\[(\d\d):(\d\d):(\d\d)\.(\d{3}) \| \w+\s*\| [\w-]+:\d+\] (.*)$")


def formed(nodes: list[BenchNode]) -> bool:
    states = [s for n in nodes if (s := n.state()) is not None]
    if len(states) < len(nodes):
        return False
    masters = {s["masterNodeId"] for s in states}
    return len(masters) == 1 and bool(next(iter(masters))) and \
        all(len(s["nodeIdentities"]) == len(nodes) for s in states)


def log_times(path: Path, day: datetime.date) -> list[tuple[float, str]]:
    """(epoch seconds, message) of every line of one log file."""
    out: list[tuple[float, str]] = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            h, mi, s, ms, msg = m.groups()
            when = datetime.datetime.combine(day, datetime.time(int(h), int(mi), int(s), int(ms) * 1000))
            out.append((when.timestamp(), msg))
    return out


def first(lines: list[tuple[float, str]], needle: str) -> float | None:
    return next((t for t, msg in lines if needle in msg), None)


def stages(nodes: list[BenchNode], t0: float) -> dict[str, float]:
    """Seconds after the launch when the last node reached each stage (from the nodes' logs)."""
    day = datetime.datetime.fromtimestamp(t0).date()
    ready, members, settled = [], [], []
    for node in nodes:
        logs = node.home / "logs"
        ready.append(first(log_times(logs / "supervisor.log", day), "node ready") or float("nan"))
        gossip = log_times(logs / "gossip.log", day)
        joined = [t for t, msg in gossip if "joined at" in msg]
        members.append(joined[len(nodes) - 2] if len(joined) >= len(nodes) - 1 else float("nan"))
        master = log_times(logs / "master.log", day)
        settled.append(max((t for t, msg in master if "elected leader" in msg or "following leader" in msg),
                           default=float("nan")))
    return {"all roles ready": max(ready) - t0, "every gossip heard every peer": max(members) - t0,
            "every master leads or follows": max(settled) - t0}


IDLE_WINDOW_S = 5.0


def idle_cpu(nodes: list[BenchNode], bus: zmq.Socket[Any], window_s: float) -> float:
    """CPU of every process of the formed, idle cluster over `window_s`, in % of one core (the
    window passes reading the first node's bus, which gossip keeps busy)."""
    procs = []
    for node in nodes:
        if node.proc is None:
            continue
        try:
            root = psutil.Process(node.proc.pid)
            procs += [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
    for p in procs:
        try:
            p.cpu_percent(None)
        except psutil.Error:
            pass
    deadline = time.monotonic() + window_s
    while (left := deadline - time.monotonic()) > 0:
        if bus.poll(int(left * 1000) + 1, zmq.POLLIN):
            bus.recv_multipart()
    total = 0.0
    for p in procs:
        try:
            total += p.cpu_percent(None)
        except psutil.Error:
            pass
    return total


def one_round(root: Path, n: int, i: int, named: bool = False) -> dict[str, float]:
    nodes = [BenchNode(root / f"round{i}", f"node{k}") for k in range(n)]
    ctx: zmq.Context[Any] = zmq.Context.instance()
    bus = make_socket(ctx, zmq.SUB, hwm=100000, subscribe=(EVERY_EVENT,),
                      connect=endpoints.bus_capture(endpoints.run_dir(nodes[0].home.resolve())))
    namespace = f"bench-form-{os.getpid()}-{i}"
    try:
        t0_wall, t0 = time.time(), time.monotonic()
        for node in nodes:
            node.launch(namespace, nodes[0] if node is not nodes[0] else None, named)
        deadline = t0 + 120
        while not formed(nodes):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{n} nodes did not form one cluster within 120 s")
            if bus.poll(int(min(left, 1.0) * 1000), zmq.POLLIN):  # the API may answer before the bus
                bus.recv_multipart()
                while bus.poll(0, zmq.POLLIN):
                    bus.recv_multipart()
        took = time.monotonic() - t0
        out = stages(nodes, t0_wall)
        out["formed (/state)"] = took
        out["idle CPU, % of one core"] = idle_cpu(nodes, bus, IDLE_WINDOW_S)
        return out
    finally:
        bus.close(0)
        for node in nodes:
            node.kill()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--named", action="store_true", help="give each node its own --node-name")
    ns = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="skulk-bench-formation-"))
    rows: list[dict[str, float]] = []
    try:
        for i in range(ns.rounds):
            rows.append(one_round(root, ns.nodes, i, ns.named))
            print(f"round {i + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in rows[-1].items()), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{ns.nodes} nodes started together, {'named' if ns.named else 'no names'}, {ns.rounds} rounds (median):")
    for key in rows[0]:
        unit = "" if "CPU" in key else "s"
        print(f"  {key:32s} {statistics.median(r[key] for r in rows):6.2f}{unit}"
              f"  (worst {max(r[key] for r in rows):.2f}{unit})")


if __name__ == "__main__":
    main()
