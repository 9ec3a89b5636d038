"""Fuzz a fresh node for a while and print what was tried and what broke.

    python -m tools.fuzz --seconds 600 [--seed N] [--keep]

Starts one node serving the demo model under a temporary home (loopback only), then, at the
same time, fires bad frames at every ZeroMQ port (tools/fuzz_ports.py) and fuzzes every HTTP
route from its OpenAPI document (tools/fuzz_http.py). Afterwards it checks the pass rule
(tools/fuzz_checks.py): no 5xx outside the envelope, no dropped or hung request, no role
crashed or restarted, memory bounded, logs not grown per frame, a chat completion served.
Prints the counts and every failure; exits 1 when there was one. Needs the test extra
(`pip install -e '.[test]'`: hypothesis, schemathesis).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tools.fuzz_checks import MODEL, NodeProbe, problems
from tools.fuzz_http import HttpCounts, fuzz_http
from tools.fuzz_ports import Counts, fire, node_targets, runner_endpoints, runner_target
from tools.ports import free_port

CLI = (sys.executable, "-m", "skulk.scripts.cli")


def start_node(root: Path) -> tuple[subprocess.Popen[bytes], Path, int, int]:
    """A node serving the demo model: (process, home, api port, cluster port)."""
    subprocess.run([*CLI, "model", "demo", "--kind", "tiny", "--home", str(root / "demo")],
                   check=True, stdout=subprocess.DEVNULL)
    home = root / "node"
    (home / "models").mkdir(parents=True)
    (home / "models" / "skulk--demo-tiny").symlink_to(root / "demo" / "models" / "skulk--demo-tiny")
    api, cluster = free_port(), free_port(pair=True)
    with open(root / "node.out", "ab") as out:
        proc = subprocess.Popen([*CLI, "run", "--home", str(home), "--api-port", str(api), "--cluster-port",
                                 str(cluster), "--listen", "127.0.0.1", "--place", MODEL],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    subprocess.run([*CLI, "admin", "wait", "--home", str(home), "--wait", "120"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([*CLI, "model", "wait", MODEL, "--url", f"http://127.0.0.1:{api}", "--timeout", "300"],
                   check=True, stdout=subprocess.DEVNULL)
    return proc, home, api, cluster


def run(seconds: float, seed: int, root: Path) -> int:
    proc, home, api, cluster = start_node(root)
    url = f"http://127.0.0.1:{api}"
    try:
        probe = NodeProbe(home, url, proc.pid)
        if why := probe.serves():
            print(f"the node does not serve before the run: {why}")
            return 1
        before = probe.snapshot()
        targets = node_targets(home, cluster) + [runner_target(e) for e in runner_endpoints(home).values()]
        frames, http = Counts(), HttpCounts()
        sender = threading.Thread(target=fire, args=(targets, seconds, seed, frames), daemon=True)
        t0 = time.monotonic()
        sender.start()
        fuzz_http(url, seconds, seed, http)
        sender.join()
        took = time.monotonic() - t0
        served = probe.serves()
        broke = problems(before, probe.snapshot(), seconds)
        failures = http.failures + broke + ([f"no chat completion afterwards: {served}"] if served else [])
        print(f"seed {seed}, {took:.0f}s")
        print(f"ZeroMQ: {sum(frames.frames.values())} frames and {sum(frames.raw.values())} raw TCP connections "
              f"to {len(targets)} ports; {sum(frames.replies.values())} answers read back")
        print(f"  by port: {dict(sorted(frames.frames.items()))}")
        print(f"  by kind: {dict(sorted(frames.kinds.items()))}")
        print(f"HTTP: {http.total()} requests over {len(http.requests)} operations; statuses "
              f"{dict(sorted(http.statuses.items()))}")
        for line in sorted(set(line.split(" -> ", 1)[-1] for line in http.internal)):  # one per distinct answer
            print(f"  500 in the envelope: {line}")
        print(f"failures: {len(failures)}")
        for line in failures:
            print(f"  {line}")
        return 1 if failures else 0
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--keep", action="store_true", help="keep the node's home (logs) afterwards")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    root = Path(tempfile.mkdtemp(prefix="skulk-fuzz-"))
    try:
        return run(args.seconds, seed, root)
    finally:
        if args.keep:
            print(f"node home and logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
