"""Benchmark: what tracing and the flight recorder cost on the hot path, same run.

    python -m tools.bench_tracing [--model-dir DIR] [--tokens 128] [--runs 5]
                                          [--baseline-ref 311f530]

Starts two real nodes on the same model directory: one from this build and one from
`--baseline-ref` (a commit before tracing, the flight recorder and the API's event records
existed; its tree is taken with `git archive` into a temporary folder and put first on the
node's PYTHONPATH). Single-stream decode tok/s is measured by the client (first to last
streamed token, as `bench_decode` does) in alternating runs: baseline build, this build with
tracing off, this build with tracing on (`PUT /v1/tracing`). Prints the medians and the
ratios of the paired runs. Greedy decoding: every run generates the same tokens.
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
from pathlib import Path

from skulk.scripts.http_client import request
from tools.bench_decode import api_rate
from tools.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("wire", "services", "supervisor", "scripts")


def baseline_tree(ref: str, into: Path) -> Path:
    """`ref`'s source as an importable `skulk` package folder (the layout setuptools maps)."""
    src = into / "src"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    farm = into / "farm" / "skulk"
    farm.mkdir(parents=True)
    for name in PACKAGES:
        (farm / name).symlink_to(src / name)
    return farm.parent


def start_node(home: Path, model_dir: Path, model: str, pythonpath: Path | None) -> tuple[subprocess.Popen, int]:
    (home / "models").mkdir(parents=True)
    (home / "models" / model_dir.name).symlink_to(model_dir)
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = f"{pythonpath}{os.pathsep}{env.get('PYTHONPATH', '')}"
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "skulk.scripts.cli", "run", "--home", str(home),
                             "--api-port", str(port), "--cluster-port", str(free_port(pair=True)),
                             "--listen", "127.0.0.1", "--namespace", f"bench-{home.name}", "--place", model],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "admin", "wait", "--home", str(home), "--wait", "60"],
                   check=True, stdout=subprocess.DEVNULL, env=env)
    subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "wait", model, "--url",
                    f"http://127.0.0.1:{port}", "--timeout", "600"], check=True, stdout=subprocess.DEVNULL, env=env)
    return proc, port


def set_tracing(port: int, on: bool) -> None:
    body = request(f"http://127.0.0.1:{port}/v1/tracing", {"enabled": on}, method="PUT")
    if body.get("enabled") is not on:
        raise SystemExit(f"could not switch tracing {'on' if on else 'off'}: {body}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--baseline-ref", default="311f530")
    ns = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="skulk-bench-tracing-"))
    procs: list[subprocess.Popen] = []
    try:
        if ns.model_dir:
            model_dir = ns.model_dir.resolve()
        else:
            from skulk.scripts.demo_model import build

            model_dir = build(work / "built")
        org, _, name = model_dir.name.partition("--")
        model = f"{org}/{name}"
        old, old_port = start_node(work / "old", model_dir, model, baseline_tree(ns.baseline_ref, work))
        procs.append(old)
        new, new_port = start_node(work / "new", model_dir, model, None)
        procs.append(new)
        set_tracing(new_port, False)
        for port in (old_port, new_port):
            api_rate(port, model, 8)  # warm both
        rates: dict[str, list[float]] = {"baseline": [], "off": [], "on": []}
        for _ in range(ns.runs):
            rates["baseline"].append(api_rate(old_port, model, ns.tokens)[0])
            rates["off"].append(api_rate(new_port, model, ns.tokens)[0])
            set_tracing(new_port, True)
            rates["on"].append(api_rate(new_port, model, ns.tokens)[0])
            set_tracing(new_port, False)
        traces = len(list((work / "new" / "traces").glob("*"))) if (work / "new" / "traces").exists() else 0
        print(f"model {model}, {ns.tokens} tokens, {ns.runs} alternating runs (greedy, single stream); "
              f"baseline build {ns.baseline_ref}; {traces} traces written while on")
        for label, key in (("baseline build", "baseline"), ("tracing off", "off"), ("tracing on", "on")):
            print(f"  {label:15s} decode tok/s median {statistics.median(rates[key]):7.2f}   "
                  f"runs {' '.join(f'{r:.2f}' for r in rates[key])}")
        off_vs_base = [o / b for o, b in zip(rates["off"], rates["baseline"])]
        on_vs_off = [n / o for n, o in zip(rates["on"], rates["off"])]
        print(f"  tracing off / baseline build: median ratio {statistics.median(off_vs_base):.3f} "
              f"(the flight recorder, event records and tracing checks; 1.0 = no cost)")
        print(f"  tracing on / tracing off:     median ratio {statistics.median(on_vs_off):.3f} "
              f"(overhead of tracing a request: {(1 - statistics.median(on_vs_off)) * 100:+.1f} %)")
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
