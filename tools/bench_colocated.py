"""Two instances on one node, stepping at once: do their runners share the cores?

`python -m tools.bench_colocated --model-dir ~/.skulk/models/HuggingFaceTB--SmolLM2-135M-Instruct
[--engine llama_cpp|mlx]` (llama.cpp: any model folder with a `model.gguf`, which `skulk model
demo` imports; MLX on the CPU: any MLX model folder). For each setting of the runners' threads (0:
every core, shared between the runners that step at once; 1: one each, the baseline: llama.cpp's
`runner.threads`, OpenBLAS's `OPENBLAS_NUM_THREADS` for MLX) a fresh node serves one instance,
then two: one stream alone, one stream beside the idle second instance, then two and four streams
at once over both. Prints aggregate tok/s.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skulk.scripts.http_client import request, wait_for_state
from tools.bench_nodes import BenchNode

USER_BLAS_THREADS = os.environ.get("OPENBLAS_NUM_THREADS")  # the shared runs keep the caller's setting
PROMPTS = ["Tell me about the sea.", "Write a short poem about trees.", "How do bicycles work?",
           "Describe a busy market in the morning."]


def runners_ready(count: int) -> Callable[[dict[str, Any]], bool]:
    """A state check: exactly `count` runners are ready."""
    return lambda state: sum("RunnerReady" in r for r in state.get("runners", {}).values()) == count


def aggregate(node: BenchNode, model: str, streams: int, tokens: int) -> float:
    """Tokens per second over `streams` requests sent at once (the router spreads them)."""
    done: list[int] = []

    def one(prompt: str) -> None:
        reply = request(f"{node.url}/v1/chat/completions", {
            "model": model, "max_tokens": tokens, "temperature": 0,
            "messages": [{"role": "user", "content": prompt}]}, timeout=600)
        done.append(int(reply["usage"]["completion_tokens"]))

    threads = [threading.Thread(target=one, args=(PROMPTS[i % len(PROMPTS)],)) for i in range(streams)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.monotonic() - t0)


def run(model_dir: Path, model: str, threads: int, tokens: int, engine: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-colocated-") as root:
        node = BenchNode(Path(root), "node", model_dir)
        node.home.joinpath("skulk.yaml").write_text(json.dumps({"runner": {"threads": threads, "engine": engine}}))
        if engine == "mlx" and threads:  # the node's runners inherit it (it also puts cpu_linear on one stream)
            os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
        elif USER_BLAS_THREADS is None:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = USER_BLAS_THREADS
        try:
            node.start(f"bench-{uuid.uuid4().hex[:8]}", None)
            out = {}
            for instances in (1, 2):
                request(f"{node.url}/place_instance", {"model_id": model}, timeout=60)
                wait_for_state(node.url, runners_ready(instances), 300)
                aggregate(node, model, 1, 8)  # warm
                out["1 stream, 1 instance" if instances == 1 else "1 stream, the other idle"] = \
                    aggregate(node, model, 1, tokens)
            for streams in (2, 4):
                out[f"{streams} streams over 2 instances"] = aggregate(node, model, streams, tokens)
            return out
        finally:
            node.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, required=True, help="a model folder (llama.cpp: with model.gguf)")
    parser.add_argument("--engine", choices=("llama_cpp", "mlx"), default="llama_cpp")
    parser.add_argument("--tokens", type=int, default=96, help="new tokens a stream")
    parser.add_argument("--threads", type=int, nargs="+", default=[0, 1], help="runner.threads settings to run")
    ns = parser.parse_args()
    model = "/".join(ns.model_dir.name.partition("--")[::2])  # <org>--<name> -> <org>/<name>
    rows = {t: run(ns.model_dir.resolve(), model, t, ns.tokens, ns.engine) for t in ns.threads}
    names = {t: f"threads {t}" if t else "shared" for t in rows}
    print(f"{'aggregate tok/s':32}" + "".join(f"{names[t]:>16}" for t in rows))
    for what in next(iter(rows.values())):
        print(f"{what:32}" + "".join(f"{rows[t][what]:16.1f}" for t in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
