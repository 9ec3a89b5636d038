"""Benchmark: time from `POST /place_instance` to ready, decode tok/s of one stream and the
aggregate of `--batch` streams at once, for the demo model placed on 1 node, Pipeline across 2
nodes and Tensor across 2 nodes (real nodes on this machine, loopback).

    python -m tools.bench_placement [--tokens 256] [--runs 3] [--batch 8] [--size tiny|100m]

On one machine the ranks share its cores, so sharding is not expected to be faster here
(see docs); the figures show the cost of the ring against one node in the same run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from skulk.scripts.http_client import instance_ready, request, wait_for_state
from tools.bench_decode import api_rate
from tools.ports import free_port


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--batch", type=int, default=8, help="streams at once for the aggregate")
    p.add_argument("--size", default="tiny", choices=("tiny", "100m"),
                   help="the demo model's size (100m: big enough for the BLAS to use its threads)")
    ns = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="skulk-bench-place-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        from skulk.scripts.demo_model import build

        model_dir = build(root / "shared", size=ns.size)
        model = f"skulk/demo-{ns.size}"
        nodes: list[tuple[str, int, int]] = []  # (url, cluster port, api port)
        for i in range(2):
            home = root / f"n{i}"
            (home / "models").mkdir(parents=True)
            (home / "models" / model_dir.name).symlink_to(model_dir)
            api, cluster = free_port(), free_port(pair=True)
            args = [sys.executable, "-m", "skulk.scripts.cli", "run", "--home", str(home), "--api-port",
                    str(api), "--cluster-port", str(cluster), "--listen", "127.0.0.1", "--namespace", "bench"]
            if nodes:
                args += ["--bootstrap-peers", f"127.0.0.1:{nodes[0][1]}"]
            procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
            nodes.append((f"http://127.0.0.1:{api}", cluster, api))
        url, _, port = nodes[0]
        subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "admin", "wait", "--home",
                        str(root / "n0"), "--wait", "60"], check=True, stdout=subprocess.DEVNULL)
        def formed(state: dict) -> bool:
            """Both nodes listed, and both name the same master: one session, not two lone ones."""
            try:
                masters = {request(f"{u}/state")["masterNodeId"] for u, _, _ in nodes}
            except OSError:  # the second node's API not up yet
                return False
            return len(state["nodeIdentities"]) == 2 and len(masters) == 1

        wait_for_state(url, formed, 60)
        print(f"model {model}, {ns.tokens} tokens, median of {ns.runs} runs, 2 nodes on one machine")
        for label, body in (("1 node", {}), ("Pipeline x2", {"min_nodes": 2, "sharding": "Pipeline"}),
                            ("Tensor x2", {"min_nodes": 2, "sharding": "Tensor"})):
            t0 = time.monotonic()
            iid = request(f"{url}/place_instance", {"model_id": model, **body})["instance_id"]
            wait_for_state(url, instance_ready(instance_id=iid), 300)
            ready = time.monotonic() - t0
            api_rate(port, model, 8)
            rate = statistics.median(api_rate(port, model, ns.tokens)[0] for _ in range(ns.runs))
            together = statistics.median(aggregate(port, model, ns.tokens, ns.batch) for _ in range(ns.runs))
            print(f"  {label:12s}: place -> ready {ready:6.2f}s   decode {rate:7.1f} tok/s"
                  f"   {ns.batch} at once {together:7.1f} tok/s")
            request(f"{url}/instance/{iid}", method="DELETE")
        return 0
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


def aggregate(port: int, model: str, tokens: int, streams: int) -> float:
    """Tokens per second of `streams` streamed completions at once, first start to last end."""
    t0 = time.monotonic()
    with ThreadPoolExecutor(streams) as pool:
        counts = list(pool.map(lambda _: api_rate(port, model, tokens)[1], range(streams)))
    return sum(counts) / (time.monotonic() - t0)


if __name__ == "__main__":
    sys.exit(main())
