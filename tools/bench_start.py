"""Benchmark: a node's start to its first answer, a cluster's formation, and an in-place restart
to serving again, each with where its time went.

    python -m tools.bench_start [--kind smollm2|tiny] [--rounds 2] [--nodes 3] [--skip start,formation,restart]

- start: `skulk run --place MODEL` (the `make run` path) on a fresh home, to the first answer of
  a one-token greedy chat completion.
- formation: N nodes started together, no names, one bootstrap peer (`bench_formation`).
- restart: a node serving MODEL, `POST /admin/restart`, to the first answer again.

The phases come from the nodes' own logs (the supervisor's, the master's, the runner's), in
seconds after the start (or the restart request). Waits are on real signals: re-checks follow
messages on the node's bus. It prints figures; it asserts none.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq

from skulk.wire import endpoints
from skulk.wire.sockets import make_socket
from skulk.wire.topics import EVERY_EVENT
from tools import bench_formation
from tools.bench_formation import first, log_times
from tools.bench_nodes import BenchNode

MODELS = {"smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct", "tiny": "skulk/demo-tiny"}
DEADLINE_S = 600.0


def build_model(root: Path, kind: str) -> Path:
    home = root / "model-home"
    subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "demo", "--kind", kind, "--home", str(home)],
                   check=True, capture_output=True, text=True, timeout=900)
    return home / "models" / MODELS[kind].replace("/", "--", 1)


def answer(node: BenchNode, model: str) -> bool:
    body = json.dumps({"model": model, "max_tokens": 1, "temperature": 0,
                       "messages": [{"role": "user", "content": "Say hi."}]}).encode()
    req = urllib.request.Request(f"{node.url}/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status == 200 and bool(json.loads(resp.read())["choices"])
    except (OSError, urllib.error.URLError, ValueError, KeyError):
        return False


def serving(node: BenchNode) -> bool:
    state = node.state() or {}
    return any("RunnerReady" in st or "RunnerRunning" in st for st in state.get("runners", {}).values())


def wait_on_bus(node: BenchNode, check: Callable[[], bool], what: str) -> float:
    """Re-check on every message of the node's bus (at least once a second: the bus is away while
    the node restarts); the monotonic time when `check` first holds."""
    ctx: zmq.Context[Any] = zmq.Context.instance()
    bus = make_socket(ctx, zmq.SUB, hwm=100000, subscribe=(EVERY_EVENT,),
                      connect=endpoints.bus_capture(endpoints.run_dir(node.home.resolve())))
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not check():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{what}: not within {DEADLINE_S:.0f}s")
            if bus.poll(int(min(left, 1.0) * 1000), zmq.POLLIN):
                while bus.poll(0, zmq.POLLIN):
                    bus.recv_multipart()
        return time.monotonic()
    finally:
        bus.close(0)


def phases(node: BenchNode, t0_wall: float) -> dict[str, float]:
    """Seconds after `t0_wall` of each phase's first log line at or after it."""
    day = datetime.datetime.fromtimestamp(t0_wall).date()
    logs = node.home / "logs"

    def after(name: str, needle: str, also: str = "") -> float:
        lines = [(t, m) for t, m in log_times(logs / name, day) if t >= t0_wall - 0.001 and also in m]
        t = first(lines, needle)
        return float("nan") if t is None else t - t0_wall

    runner_log = next(iter(sorted(logs.glob("runner-*.log"), key=lambda p: p.stat().st_mtime, reverse=True)), None)
    out = {
        "drained": after("supervisor.log", "requests have ended"),
        "old tree stopped, exec": after("supervisor.log", "restarting in place"),
        "supervisor up": after("supervisor.log", "starting: home"),
        "every role ready": after("supervisor.log", "node ready"),
        "leading": after("master.log", "elected leader"),
        "runner started": after("supervisor.log", "runner-", also=" started (pid"),
    }
    if runner_log is not None:
        out["runner: mlx imported, device chosen"] = after(runner_log.name, "device:")
        out["runner: model loaded (+ matmul check)"] = after(runner_log.name, "loaded ")
        out["runner: warmed up"] = after(runner_log.name, "warm-up:")
        out["runner ready"] = after(runner_log.name, "ready on")
    return {k: v for k, v in out.items() if v == v}  # phases this path has (NaN: not in it)


def start_round(root: Path, model_dir: Path, model: str, i: int) -> dict[str, float]:
    node = BenchNode(root / f"start{i}", "node", model_dir)
    try:
        t0_wall, t0 = time.time(), time.monotonic()
        node.launch(f"bench-start-{uuid.uuid4().hex[:8]}", None, extra=("--place", model))
        up = wait_until_api(node)
        ready = wait_on_bus(node, lambda: serving(node), "instance ready")
        answered = wait_on_bus(node, lambda: answer(node, model), "first answer")
        out = {"API answers": up - t0, **phases(node, t0_wall), "instance ready (/state)": ready - t0,
               "first answer": answered - t0}
        return out
    finally:
        node.kill()


def wait_until_api(node: BenchNode) -> float:
    subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "admin", "wait", "--home", str(node.home),
                    "--wait", str(int(DEADLINE_S))], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic()


def restart_round(root: Path, model_dir: Path, model: str, i: int) -> dict[str, float]:
    node = BenchNode(root / f"restart{i}", "node", model_dir)
    try:
        node.launch(f"bench-restart-{uuid.uuid4().hex[:8]}", None, extra=("--place", model))
        wait_until_api(node)
        wait_on_bus(node, lambda: answer(node, model), "first answer before the restart")
        old_pids = {c.pid for c in psutil_children(node)}
        t0_wall, t0 = time.time(), time.monotonic()
        req = urllib.request.Request(f"{node.url}/admin/restart", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200, resp.status
        back = wait_on_bus(node, lambda: not old_pids & {c.pid for c in psutil_children(node)} and answer(node, model),
                           "serving again")
        return {**phases(node, t0_wall), "serving again (first answer)": back - t0}
    finally:
        node.kill()


def psutil_children(node: BenchNode) -> list[Any]:
    import psutil

    try:
        return psutil.Process(node.proc.pid).children(recursive=True) if node.proc else []
    except psutil.Error:
        return []


def report(title: str, rows: list[dict[str, float]]) -> None:
    print(f"{title} ({len(rows)} round(s); median, worst):")
    keys = sorted({k for r in rows for k in r}, key=lambda k: statistics.median(r[k] for r in rows if k in r))
    for key in keys:
        values = [r[key] for r in rows if key in r]
        unit = "" if "CPU" in key else "s"
        print(f"  {key:40s} {statistics.median(values):7.2f}{unit}  (worst {max(values):.2f}{unit})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", choices=sorted(MODELS), default="smollm2")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--nodes", type=int, default=3, help="formation: nodes started together")
    p.add_argument("--skip", default="", help="comma-separated: start, formation, restart")
    ns = p.parse_args()
    skip = set(filter(None, ns.skip.split(",")))
    root = Path(tempfile.mkdtemp(prefix="skulk-bench-start-"))
    try:
        model_dir, model = build_model(root, ns.kind), MODELS[ns.kind]
        if "start" not in skip:
            report(f"skulk run --place {model} to the first answer",
                   [start_round(root, model_dir, model, i) for i in range(ns.rounds)])
        if "formation" not in skip:
            report(f"{ns.nodes} nodes started together, no names, to one cluster",
                   [bench_formation.one_round(root, ns.nodes, i) for i in range(ns.rounds)])
        if "restart" not in skip:
            report(f"POST /admin/restart of a node serving {model} to serving again",
                   [restart_round(root, model_dir, model, i) for i in range(ns.rounds)])
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
