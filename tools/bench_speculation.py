"""Benchmark: speculative decoding off vs on, one stream, same run.

    python -m tools.bench_speculation [--runs 5] [--tokens 96] [--draft-tokens 4] [--engine mlx|llama_cpp]

Builds SmolLM2-135M-Instruct as `skulk model demo` does, and two drafters for it offline: the
model itself (the mechanism's upper bound: every draft kept) and its first `--small-layers`
layers with its own norm and head (an early-exit drafter, same tokenizer). Starts real nodes one
after the other (each alone on the machine): plain, `prompt_lookup`, and `drafter` with each
drafter. Each answers, one request at a time, a copy workload (an answer that repeats a list from
its prompt) and a free one, streamed and greedy. Per workload: decode tok/s (completion tokens
after the first over first to last content chunk, client-side), TTFT, drafts accepted and
rejected, and whether the text is the plain node's. Medians over --runs. It prints; it asserts
nothing. `--engine llama_cpp` serves the model's GGUF file through llama.cpp instead (prompt
lookup only: llama.cpp's runner has no drafter mode).
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, cast

import yaml

from skulk.scripts.http_client import wait_for_state
from tools.bench_models import build
from tools.bench_nodes import BenchNode

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
WORKLOADS = {
    "copy": "Repeat this list exactly, one item per line, and nothing else: apples, oranges, pears, plums, "
            "cherries, grapes, lemons, limes, figs, dates, melons, peaches, apricots, mangoes, kiwis, "
            "papayas, guavas, lychees, quinces, olives.",
    "free": "Explain in a few sentences why the sky is blue.",
}


def stream(url: str, prompt: str, tokens: int) -> dict[str, Any]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    body = {"model": MODEL, "max_tokens": tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "messages": [{"role": "user", "content": prompt}]}
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    first = last = None
    text = ""
    usage: dict[str, Any] = {}
    for raw in conn.getresponse():
        line = raw.strip()
        if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
            continue
        obj = json.loads(line[5:])
        usage = obj.get("usage") or usage
        piece = ((obj.get("choices") or [{}])[0].get("delta") or {}).get("content")
        if piece:
            last = time.perf_counter()
            first = first or last
            text += piece
    conn.close()
    n = usage.get("completion_tokens", 0)
    details = usage.get("completion_tokens_details") or {}
    return {"text": text, "ttft": (first or t0) - t0,
            "tok_s": (n - 1) / (last - first) if first and last and last > first else 0.0,
            "accepted": details.get("accepted_prediction_tokens", 0),
            "rejected": details.get("rejected_prediction_tokens", 0), "tokens": n}


def small_drafter(model_dir: Path, layers: int) -> Path:
    """The model's first `layers` layers, its norm and head: a drafter made with no download."""
    import mlx.core as mx

    out = model_dir.parent / f"{model_dir.name}-{layers}L"
    if out.is_dir():
        return out
    shutil.copytree(model_dir, out, ignore=shutil.ignore_patterns("*.safetensors"))
    weights: dict[str, Any] = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        weights.update(cast("dict[str, mx.array]", mx.load(str(f))))  # a .safetensors file loads as a dict
    keep = {k: v for k, v in weights.items()
            if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers}
    mx.save_safetensors(str(out / "model.safetensors"), keep, metadata={"format": "mlx"})
    config = json.loads((out / "config.json").read_text())
    config["num_hidden_layers"] = layers
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def measure(root: Path, model_dir: Path, name: str, config: dict[str, Any], ns: argparse.Namespace,
            also: Path | None = None) -> dict[str, Any]:
    node = BenchNode(root, name, model_dir)
    if also is not None:  # a drafter, staged beside the model
        (node.home / "models" / also.name).symlink_to(also)
    (node.home / "skulk.yaml").write_text(yaml.safe_dump(config))
    try:
        node.start(f"bench-{uuid.uuid4().hex[:8]}", None, extra=("--place", MODEL))
        wait_for_state(node.url, lambda s: any("RunnerReady" in r for r in s.get("runners", {}).values()), 300)
        out = {}
        for workload, prompt in WORKLOADS.items():
            stream(node.url, prompt, ns.tokens)  # warm
            runs = [stream(node.url, prompt, ns.tokens) for _ in range(ns.runs)]
            out[workload] = {k: statistics.median(r[k] for r in runs) for k in ("tok_s", "ttft", "accepted", "rejected",
                                                                                 "tokens")}
            out[workload]["text"] = runs[0]["text"]
        return out
    finally:
        node.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--draft-tokens", type=int, default=4)
    p.add_argument("--small-layers", type=int, default=8)
    p.add_argument("--engine", choices=("mlx", "llama_cpp"), default="mlx")
    ns = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="skulk-bench-spec-"))
    model_dir = build("smollm2", root)
    runner = {"runner": {"engine": ns.engine}}
    spec = {"num_draft_tokens": ns.draft_tokens}
    off = measure(root, model_dir, "plain", runner, ns)
    modes = {"prompt lookup": measure(root, model_dir, "lookup",
                                      {**runner, "speculative": {**spec, "mode": "prompt_lookup"}}, ns)}
    if ns.engine == "mlx":
        small = small_drafter(model_dir, ns.small_layers)
        modes["drafter: itself"] = measure(root, model_dir, "self", {**runner, "speculative": {
            **spec, "mode": "drafter", "drafter": MODEL}}, ns)
        modes[f"drafter: {ns.small_layers} layers"] = measure(root, model_dir, "small", {**runner, "speculative": {
            **spec, "mode": "drafter", "drafter": small.name.replace("--", "/", 1)}}, ns, small)
    print(f"{MODEL} on {ns.engine}, one stream, greedy, {ns.tokens} tokens max, median of {ns.runs}")
    print("  mode                | workload | off tok/s  TTFT | on tok/s  TTFT | speed-up | kept/thrown | same text")
    for mode, on in modes.items():
        for w in WORKLOADS:
            a, b = off[w], on[w]
            print(f"  {mode:<19} | {w:<8} | {a['tok_s']:9.1f} {a['ttft']:5.2f} | {b['tok_s']:8.1f} {b['ttft']:5.2f} | "
                  f"{b['tok_s'] / a['tok_s'] if a['tok_s'] else 0:8.2f} | {b['accepted']:.0f}/{b['rejected']:.0f} "
                  f"of {b['tokens']:.0f} | {a['text'] == b['text']}")
    print("  target: prompt lookup on the copy workload >= 1.5x single-stream decode, identical text")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
