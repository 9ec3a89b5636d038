"""Benchmark: single-stream decode tok/s through the API vs in-process mlx_lm, same run.

    python -m tools.bench_decode [--model-dir DIR] [--tokens 256] [--runs 3]

Builds the demo model unless --model-dir names another MLX model directory
(`<org>--<name>`). The baseline runs `mlx_lm.stream_generate` in a fresh process with the
runner's own CPU path (OpenBLAS preload, fp32); the API figure is measured by the client, from
the first to the last streamed token, on a real node started for the run. Baseline and API
runs alternate (baseline, API, baseline, API ...) so machine drift hits both equally; the
ratio is the median of the paired ratios (target >= 0.95). Greedy decoding; both sides
generate the same tokens.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.ports import free_port

PROMPT = "Explain why simple is better than complex."

BASELINE = r"""
import json, sys, time
from skulk.services.runner.blas import preload_blas
preload_blas()
import mlx.core as mx
from mlx_lm import load, stream_generate
from mlx_lm.sample_utils import make_sampler
model_dir, n, prompt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
model, tok = load(model_dir)
model.set_dtype(mx.float32)
ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
for line in sys.stdin:  # one run per line asked, so runs can alternate with the API's
    stamps = []
    for r in stream_generate(model, tok, ids, max_tokens=n, sampler=make_sampler(temp=0.0)):
        stamps.append(time.perf_counter())
    print(json.dumps({"rate": (len(stamps) - 1) / (stamps[-1] - stamps[0]), "tokens": len(stamps)}),
          flush=True)
"""


class Baseline:
    """In-process mlx_lm in its own interpreter, kept loaded; `run()` generates once."""

    def __init__(self, model_dir: Path, tokens: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", BASELINE, str(model_dir), str(tokens), PROMPT],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)

    def run(self) -> tuple[float, int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        out = json.loads(self.proc.stdout.readline())
        return out["rate"], out["tokens"]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def api_rate(port: int, model: str, n: int) -> tuple[float, int, float]:
    """Client-side decode rate of one streamed completion, and the runner's own figure."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": model, "max_tokens": n, "temperature": 0, "stream": True,
        "messages": [{"role": "user", "content": PROMPT}]}), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    stamps, runner_tps = [], 0.0
    for raw in resp:
        line = raw.strip()
        if line.startswith(b"data: {") and b'"choices"' in line and b'"finish_reason":null' in line:
            stamps.append(time.perf_counter())
        elif line.startswith(b": generation_stats "):
            runner_tps = json.loads(line[len(b": generation_stats "):])["generation_tps"]
    conn.close()
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]), len(stamps), runner_tps


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--runs", type=int, default=3)
    ns = p.parse_args()
    home = Path(tempfile.mkdtemp(prefix="skulk-bench-"))
    node = None
    try:
        (home / "models").mkdir()
        if ns.model_dir:
            model_dir = ns.model_dir.resolve()
            (home / "models" / model_dir.name).symlink_to(model_dir)
        else:
            from skulk.scripts.demo_model import build

            model_dir = build(home / "models")
        org, _, name = model_dir.name.partition("--")
        model = f"{org}/{name}"
        port = free_port()
        node = subprocess.Popen([sys.executable, "-m", "skulk.scripts.cli", "run", "--home", str(home),
                                 "--api-port", str(port), "--cluster-port", str(free_port(pair=True)),
                                 "--listen", "127.0.0.1", "--place", model],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "admin", "wait", "--home", str(home),
                        "--wait", "60"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "wait", model, "--url",
                        f"http://127.0.0.1:{port}", "--timeout", "600"], check=True, stdout=subprocess.DEVNULL)
        baseline = Baseline(model_dir, ns.tokens)
        try:
            baseline.run()  # warm both paths once
            api_rate(port, model, 8)
            base, api = [], []
            for _ in range(ns.runs):
                base.append(baseline.run())
                api.append(api_rate(port, model, ns.tokens))
        finally:
            baseline.close()
        ratios = [a[0] / b[0] for a, b in zip(api, base)]
        print(f"model {model}, {ns.tokens} tokens, {ns.runs} alternating runs (greedy, single stream)")
        print(f"  in-process mlx_lm.stream_generate : {statistics.median(r for r, _ in base):8.1f} tok/s"
              f"  ({base[0][1]} tokens)")
        print(f"  through the API (client-side)     : {statistics.median(r for r, _, _ in api):8.1f} tok/s"
              f"  ({api[0][1]} tokens)")
        print(f"  runner's own generation_tps       : {statistics.median(t for _, _, t in api):8.1f} tok/s")
        print(f"  paired ratios API / in-process    : {', '.join(f'{r:.3f}' for r in ratios)}")
        print(f"  ratio (median of pairs)           : {statistics.median(ratios):8.3f}  (target >= 0.95)")
        return 0
    finally:
        if node is not None:
            os.killpg(node.pid, signal.SIGTERM)
            try:
                node.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
