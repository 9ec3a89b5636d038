"""Benchmark: a node killed mid-stream, N times. Node A serves the API; node B hosts the demo
model's instance. Each round: place on B, start streams through A, SIGKILL B's whole process
tree once tokens flow, and time the clients' error events; then relaunch B (same home) and
wait until it has rejoined. Node A runs with `api.resume.max_attempts: 0`: by default its
clients' answers would go on elsewhere (`docs/operations.md`), and this measures the error they
get when that is off or spent.

    python -m tools.bench_node_kill [--kills 10] [--streams 3]

Prints the median and worst time from the kill to a client's error against the 2 s target,
next to the baseline measured in the same rounds: the time until the cluster state (GET
/state on A) no longer lists B, which is when a client that only watched the state would know.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from skulk.scripts.http_client import instance_ready, request, wait_for_state
from tools.bench_nodes import BenchNode
from tools.stream_load import StreamLoad, chat_body, summary

MODEL = "skulk/demo-tiny"
TARGET_S = 2.0
NAMESPACE = "bench-kill"


def one_round(a: BenchNode, b: BenchNode, streams: int) -> tuple[list[float], float]:
    b_id = request(f"{b.url}/node_id")

    def formed(state: dict) -> bool:  # B listed, and both nodes name the same master
        return b_id in state["nodeIdentities"] and request(f"{b.url}/state")["masterNodeId"] == state["masterNodeId"]

    wait_for_state(a.url, formed, 60)
    a_id = request(f"{a.url}/node_id")
    iid = request(f"{a.url}/place_instance", {"model_id": MODEL, "excluded_nodes": [a_id]})["instance_id"]
    wait_for_state(a.url, instance_ready(instance_id=iid), 120)
    clients = StreamLoad("127.0.0.1", a.api, [chat_body(MODEL, "Tell me everything.", 1500)
                                              for _ in range(streams)], read_timeout=30).start()
    if not clients.wait_for(lambda outs: any(o.tokens > 0 for o in outs), 60):
        raise RuntimeError(f"no tokens before the kill\n{summary(clients.outcomes)}")
    killed_at = time.monotonic()
    b.kill()
    wait_for_state(a.url, lambda s: b_id not in s["nodeIdentities"], 30)
    state_gone = time.monotonic() - killed_at
    outcomes = clients.join(30)
    if any(o.hung or o.error_at is None for o in outcomes):
        raise RuntimeError(f"a client did not get its error\n{summary(outcomes, killed_at)}")
    return [o.error_at - killed_at for o in outcomes if o.error_at is not None], state_gone


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--streams", type=int, default=3, help="concurrent streams per round")
    ns = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="skulk-bench-kill-"))
    a = b = None
    try:
        from skulk.scripts.demo_model import build

        model_dir = build(root / "shared")
        a, b = BenchNode(root, "a", model_dir), BenchNode(root, "b", model_dir)
        (a.home / "skulk.yaml").write_text("api:\n  resume:\n    max_attempts: 0\n")  # the error, not the resume
        a.start(NAMESPACE, None)
        b.start(NAMESPACE, a)
        worst_per_round, state_times = [], []
        for n in range(1, ns.kills + 1):
            times, state_gone = one_round(a, b, ns.streams)
            worst_per_round.append(max(times))
            state_times.append(state_gone)
            print(f"  kill {n:2d}: clients' errors {min(times):.3f}-{max(times):.3f}s after the kill; "
                  f"the state dropped the node after {state_gone:.3f}s", flush=True)
            b.start(NAMESPACE, a)
        med, worst = statistics.median(worst_per_round), max(worst_per_round)
        base = statistics.median(state_times)
        print(f"node killed mid-stream x{ns.kills} ({ns.streams} streams each): time to the client's error "
              f"median {med:.3f}s, worst {worst:.3f}s; target {TARGET_S:.1f}s (worst/target "
              f"{worst / TARGET_S:.2f}); baseline, the state dropping the node: median {base:.3f}s "
              f"(client/baseline {med / base:.2f})")
        return 0 if worst <= TARGET_S else 1
    finally:
        for node in (b, a):
            if node is not None:
                node.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
