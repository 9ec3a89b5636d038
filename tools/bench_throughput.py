"""Benchmark: concurrent streaming throughput and TTFT, Skulk vs mlx_lm.server, same run.

    python -m tools.bench_throughput [--sizes 100m|tiny|smollm2] [--model-dir DIR ...]
        [--concurrency 1,2,4,8,16] [--tokens 128] [--repeats 1] [--prompt-tokens 128]
        [--skulk-config skulk.yaml] [--max-batch 64] [--prefill-chunk 2048] [--no-baseline]
        [--no-skulk] [--baseline-as-stored] [--engine mlx|llama_cpp] [--mlx-too]

Builds the models named by --sizes (`bench_models.py`) unless --model-dir names MLX model
directories (`<org>--<name>`). For each model it starts `mlx_lm.server` (the baseline, with the
runner's OpenBLAS preload, on the same dtype path as Skulk's CPU runner: fp32, a quantized model
dequantized) and a real Skulk node placing the directory as given. For each concurrency C, C client
threads each send one streaming greedy chat completion of --tokens tokens with its own distinct
prompt of about --prompt-tokens tokens (seeded random words, then a request for a long essay about
them, so a real model answers up to --tokens: no prefix-cache hits past the chat template). Per
client: TTFT (request sent to first non-empty `delta.content`), content chunks and the stream's
`usage.completion_tokens`; per level: aggregate tok/s = all completion tokens (content chunks where
no usage came) / (last client end - first client start). A client whose
text is withheld to the end (both servers hold back undecodable bytes; the demo models' random
weights often emit them) has no TTFT to see: TTFT percentiles leave it out and count it.
Levels alternate between the servers so machine drift hits both (if an idle server uses CPU,
they run one after the other, each alone, and the output says so). Medians over --repeats. Also:
single-stream in-process `mlx_lm.stream_generate` vs Skulk's C=1 decode rate (client-side, first
to last content chunk), and per level each client's decode rate beside the aggregate (servers'
greedy answers to one prompt may end at different lengths, which moves aggregates, not decode
rates). It prints figures and targets; it asserts none. GPUs: docs/operations.md.

`--engine llama_cpp` (a model imported from GGUF, e.g. `--sizes smollm2`): the Skulk node runs
the llama.cpp engine on the directory's `model.gguf`, and the baseline is llama.cpp's own
`llama-server` on the same file (built once by `tools/llama_server.py`; `-np` the largest level,
16,384 tokens of context, one thread per core); `--mlx-too` adds a Skulk node on the MLX CPU
path as a third column. Targets then: single-stream decode >= 0.95x llama-server's, aggregate at
8 >= 1.2x, TTFT p50 at 8 no worse (docs/engines.md).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from tools.bench_models import STREAM_GENERATE, baseline_dir, build, node_config
from tools.bench_report import BASE, LLAMA_SERVER, SKULK, SKULK_MLX, Level, print_report
from tools.ports import free_port

WORDS = ("time data model river stone light cloud green quick paper music table window garden "
         "number simple better complex flat nested sparse dense read count special rules break "
         "practical purity errors pass silently explicit implicit beautiful ugly obvious way "
         "namespace idea honking great now never often right hard easy explain good bad face "
         "ambiguity temptation guess should one only first unless dutch although").split()
SERVER_CODE = ("from skulk.services.runner.blas import preload_blas; preload_blas(); import sys; "
               "sys.argv=['mlx_lm.server']+sys.argv[1:]; from mlx_lm.server import main; main()")
READ_TIMEOUT_S = 600.0
IDLE_CPU_LIMIT = 5.0  # percent of one core an idle server may use and still run alongside
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
# asks a real model for a long answer: greedy answers to bare random words may end after a dozen
# tokens, and a decode rate over those is mostly its first steps (random demo models ignore it)
LONG_ANSWER = "\n\nWrite a long essay about these words, one paragraph per word."


@dataclass
class Client:
    start: float = 0.0
    end: float = 0.0
    first: float | None = None  # first non-empty content
    last: float | None = None
    chunks: int = 0
    tokens: int | None = None  # completion_tokens of the stream's usage, where the server sends it
    error: str | None = None


def stream_chat(port: int, model: str, prompt: str, max_tokens: int, go: threading.Barrier | None,
                out: Client) -> None:
    """One streaming completion; fills `out` (times from time.perf_counter)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=READ_TIMEOUT_S)
    body = json.dumps({"model": model, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True},
                       "messages": [{"role": "user", "content": prompt}]})
    try:
        if go is not None:
            go.wait()
        out.start = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            out.error = f"HTTP {resp.status}: {resp.read()[:200]!r}"
            return
        for raw in resp:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue  # blank lines and `:` comments
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            obj = json.loads(payload)
            if "error" in obj:
                out.error = str(obj["error"])[:200]
                continue
            if obj.get("usage"):
                out.tokens = obj["usage"].get("completion_tokens")
            if ((obj.get("choices") or [{}])[0].get("delta") or {}).get("content"):
                out.last = time.perf_counter()
                out.first = out.first or out.last
                out.chunks += 1
    except (OSError, http.client.HTTPException, ValueError) as exc:
        out.error = f"client: {exc!r}"
    finally:
        out.end = time.perf_counter()
        conn.close()


def run_level(port: int, model: str, prompts: list[str], max_tokens: int) -> Level:
    """All clients at once, one request each."""
    clients = [Client() for _ in prompts]
    go = threading.Barrier(len(prompts))
    threads = [threading.Thread(target=stream_chat, args=(port, model, p, max_tokens, go, c), daemon=True)
               for p, c in zip(prompts, clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(READ_TIMEOUT_S + 60)
    ok = [c for c in clients if c.error is None and c.first is not None]
    span = max(c.end for c in clients) - min(c.start for c in clients)
    # text that came as it was generated, not withheld to the end as undecodable bytes
    streamed = [c for c in ok if 2 * c.chunks >= (c.tokens or c.chunks)]
    ttft = [c.first - c.start for c in streamed if c.first is not None]
    decode = [(c.chunks - 1) / (c.last - c.first) for c in streamed
              if c.chunks > 1 and c.last is not None and c.first is not None]
    tokens = [c.tokens if c.tokens is not None else c.chunks for c in ok]
    pct = (statistics.quantiles(ttft, n=100, method="inclusive") if len(ttft) > 1  # percentiles 1..99
           else [ttft[0] if ttft else float("nan")] * 99)  # quantiles() needs two points
    for err in filter(None, (c.error for c in clients)):
        print(f"    client error: {err}", file=sys.stderr)
    return Level(agg=sum(tokens) / span, p50=pct[49], p90=pct[89],
                 decode=statistics.mean(decode) if decode else float("nan"), errors=len(clients) - len(ok),
                 chunks=statistics.mean(c.chunks for c in clients),
                 tokens=statistics.mean(tokens) if tokens else 0.0, withheld=len(ok) - len(streamed))


class Server:
    """A server process in its own session (killed by process group), with its log in a file."""

    def __init__(self, name: str, argv: list[str], port: int, model: str, log: Path,
                 ready: Callable[[Server], None], piped: bool = False) -> None:
        self.name, self.argv, self.port, self.model, self.log, self._ready = name, argv, port, model, log, ready
        self.piped = piped  # its output is read for the ready line (`wait_line`), then logged
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, warm_prompt: str, tokens: int) -> None:
        with self.log.open("ab") as f:
            self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE if self.piped else f, bufsize=0,
                                         stderr=subprocess.STDOUT, env=ENV, start_new_session=True)
        self._ready(self)
        warm = Client()
        stream_chat(self.port, self.model, warm_prompt, tokens, None, warm)
        if warm.error or not warm.chunks:
            raise RuntimeError(f"{self.name} warm-up failed: {warm.error or 'no content'}")

    def stop(self) -> None:
        """SIGTERM the process group, then SIGKILL whatever of it is left (30 s at most)."""
        if self.proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
        self.proc = None

    def wait_line(self, marker: bytes, deadline_s: float = 300.0) -> None:
        """Read the server's output (an unbuffered pipe: `select` must see every byte) until it
        prints `marker`, then copy the rest to the log file from a daemon thread."""
        assert self.proc is not None and self.proc.stdout is not None
        out, log, seen = self.proc.stdout, self.log.open("ab", buffering=0), b""
        deadline = time.monotonic() + deadline_s
        while marker not in seen:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                raise TimeoutError(f"{self.name} did not print {marker!r} within {deadline_s:.0f}s")
            chunk = out.read(65536)
            if not chunk:
                raise RuntimeError(f"{self.name} exited with {self.proc.wait()}")
            log.write(chunk)
            seen = seen[-len(marker):] + chunk
        threading.Thread(target=lambda: [log.write(c) for c in iter(lambda: out.read(65536), b"")],
                         daemon=True).start()

    def idle_cpu(self, seconds: float = 3.0) -> float:
        """CPU percent of one core used by the server's process tree while nobody sends requests."""
        assert self.proc is not None
        root = psutil.Process(self.proc.pid)

        def total() -> float:  # user + system seconds (an idle tree keeps its processes)
            return sum(sum(p.cpu_times()[:2]) for p in [root, *root.children(recursive=True)])

        before = total()
        time.sleep(seconds)
        return 100.0 * (total() - before) / seconds


def baseline_server(model_dir: Path, log: Path) -> Server:
    port = free_port()
    argv = [sys.executable, "-c", SERVER_CODE, "--model", str(model_dir), "--host", "127.0.0.1",
            "--port", str(port), "--max-tokens", "100000", "--log-level", "INFO"]
    # mlx_lm.server logs this line once its socket listens (the model loads on the first request)
    return Server(BASE, argv, port, "default_model", log, lambda s: s.wait_line(b"Starting httpd at"), piped=True)


def llama_server(model_dir: Path, log: Path, slots: int) -> Server:
    """llama.cpp's own server on the directory's GGUF file (the engine's baseline)."""
    from tools.llama_server import build as build_llama_server

    port = free_port()
    argv = [str(build_llama_server()), "-m", str(model_dir / "model.gguf"), "--host", "127.0.0.1",
            "--port", str(port), "-np", str(slots), "-c", "16384", "-t", str(len(os.sched_getaffinity(0))),
            "-ngl", "999", "--no-webui"]  # every layer on the GPU where it is built for one (a CPU build ignores it)

    def ready(s: Server) -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, http.client.HTTPException):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    return
            time.sleep(0.2)
        raise TimeoutError("llama-server did not answer /health within 300 s")

    return Server(LLAMA_SERVER, argv, port, "model", log, ready)


def skulk_server(home: Path, model_dir: Path, model: str, config: Path | None, name: str = SKULK) -> Server:
    (home / "models").mkdir(parents=True)
    (home / "models" / model_dir.name).symlink_to(model_dir)
    if config is not None:
        shutil.copy(config, home / "skulk.yaml")
    port = free_port()
    argv = [sys.executable, "-m", "skulk.scripts.cli", "run", "--home", str(home), "--api-port", str(port),
            "--cluster-port", str(free_port(pair=True)), "--listen", "127.0.0.1", "--place", model]

    def ready(s: Server) -> None:  # the node is up, then the model's runners are ready
        python("-m", "skulk.scripts.cli", "admin", "wait", "--home", str(home), "--wait", "60")
        python("-m", "skulk.scripts.cli", "model", "wait", model, "--url", f"http://127.0.0.1:{port}",
               "--timeout", "600")

    return Server(name, argv, port, model, home / "node.log", ready)


def log_tail(s: Server) -> None:
    tail = s.log.read_text(errors="replace").splitlines()[-30:] if s.log.exists() else []
    print(f"--- last lines of {s.name}'s log ---", *tail, sep="\n", file=sys.stderr)


def python(*args: str) -> str:
    """Run `python ARGS` to completion (offline hub; raises if it fails) and return its stdout."""
    return subprocess.run([sys.executable, *args], check=True, stdout=subprocess.PIPE, text=True, env=ENV).stdout


def build_prompts(model_dir: Path, n_tokens: int, levels: list[int],
                  repeats: int) -> tuple[dict[tuple[int, int], list[str]], dict[str, str]]:
    """Distinct seeded prompts per (C, repeat), the same for both servers, and one warm-up each."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    rng = random.Random(f"{model_dir.name}:{n_tokens}")

    def prompt() -> str:  # seeded random words and LONG_ANSWER until the tokenizer counts n_tokens
        words: list[str] = []
        while len(tok.encode(" ".join(words) + LONG_ANSWER, add_special_tokens=False)) < n_tokens:
            words.append(rng.choice(WORDS))
        return " ".join(words) + LONG_ANSWER

    prompts = {(c, r): [prompt() for _ in range(c)] for c in levels for r in range(repeats)}
    return prompts, {n: prompt() for n in (BASE, SKULK, SKULK_MLX, LLAMA_SERVER)}


def bench_model(model_dir: Path, root: Path, ns: argparse.Namespace, levels: list[int]) -> None:
    model = "/".join(model_dir.name.partition("--")[::2])  # <org>--<name> -> <org>/<name>
    prompts, warm = build_prompts(model_dir, ns.prompt_tokens, levels, ns.repeats)
    llama = ns.engine == "llama_cpp"
    base_dir = model_dir if llama else baseline_dir(model_dir, root, ns.baseline_as_stored)
    if base_dir != model_dir:
        print(f"{model}: the baseline serves an fp32 copy dequantized by mlx-lm ({base_dir}), "
              "the dtype path Skulk's CPU runner takes", flush=True)
    servers: list[Server] = []
    if not ns.no_baseline:
        servers.append(llama_server(model_dir, root / f"llama-server-{model_dir.name}.log", max(levels)) if llama
                       else baseline_server(base_dir, root / f"baseline-{model_dir.name}.log"))
    if not ns.no_skulk:
        servers.append(skulk_server(root / f"node-{model_dir.name}", model_dir, model, ns.skulk_config))
    if not ns.no_skulk and llama and ns.mlx_too:
        servers.append(skulk_server(root / f"node-mlx-{model_dir.name}", model_dir, model, ns.mlx_config, SKULK_MLX))
    runs: dict[str, dict[int, list[Level]]] = {s.name: {c: [] for c in levels} for s in servers}

    def measure(s: Server, c: int, r: int) -> None:
        lv = run_level(s.port, s.model, prompts[(c, r)], ns.tokens)
        runs[s.name][c].append(lv)
        print(f"  {s.name:<13} C={c:<3} run {r + 1}: {lv.agg:8.1f} tok/s  TTFT p50 {lv.p50:.3f}s "
              f"p90 {lv.p90:.3f}s  per client {lv.tokens:.0f} tokens {lv.chunks:.0f} chunks, "
              f"decode {lv.decode:.1f} tok/s  withheld {lv.withheld}  errors {lv.errors}", flush=True)

    sg = None
    try:
        for s in list(servers):
            print(f"{model}: starting {s.name} on port {s.port}", flush=True)
            try:
                s.start(warm[s.name], ns.tokens)
            except Exception as exc:  # noqa: BLE001 - one server that cannot start leaves the others' figures
                log_tail(s)
                print(f"{model}: {s.name} did not start ({exc}): measured without it", flush=True)
                s.stop()
                servers.remove(s)
                runs.pop(s.name)
        if not servers:
            raise RuntimeError("no server started")
        if not ns.no_skulk and 1 in levels and not llama:
            out = python("-c", STREAM_GENERATE, str(base_dir), str(ns.tokens), str(ns.repeats), prompts[(1, 0)][0])
            sg = statistics.median(json.loads(out.strip().splitlines()[-1]))
        idle = {s.name: s.idle_cpu() for s in servers}
        print("  idle CPU (% of one core): " + ", ".join(f"{k} {v:.1f}" for k, v in idle.items()))
        alone = len(servers) >= 2 and max(idle.values()) > IDLE_CPU_LIMIT
        mode = (f"servers run one after the other, each alone (an idle one used > {IDLE_CPU_LIMIT:.0f}% CPU)"
                if alone else "servers alternate per level, all running (idle ones use ~0% CPU)"
                if len(servers) >= 2 else f"{servers[0].name} only")
        for group in ([[s] for s in servers] if alone else [servers]):
            for s in servers:  # a group runs with only its own servers up
                if s not in group:
                    s.stop()
                elif s.proc is None:
                    s.start(warm[s.name], ns.tokens)
            for c in levels:
                for r in range(ns.repeats):
                    for s in group:
                        measure(s, c, r)
    except Exception:
        for s in servers:
            log_tail(s)
        raise
    finally:
        for s in servers:
            s.stop()
    print_report(model, ns, levels, mode, runs, sg, LLAMA_SERVER if llama else BASE)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="100m", help="models to build (comma-separated): tiny, 100m (random "
                   "demo models), smollm2 (the real SmolLM2-135M-Instruct, imported from its GGUF package)")
    p.add_argument("--model-dir", type=Path, action="append", default=[], help="MLX model dir (repeatable)")
    p.add_argument("--concurrency", default="1,2,4,8,16")
    for flag, default in (("--tokens", 128), ("--repeats", 1), ("--prompt-tokens", 128)):
        p.add_argument(flag, type=int, default=default)
    p.add_argument("--skulk-config", type=Path, help="skulk.yaml copied into the node's home")
    p.add_argument("--max-batch", type=int, help="the node's runner.max_batch (a GPU: 32 or 64)")
    p.add_argument("--prefill-chunk", type=int, help="the node's runner.prefill_chunk (a GPU: 2048)")
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument("--no-skulk", action="store_true")
    p.add_argument("--baseline-as-stored", action="store_true", help="the baseline runs a quantized model "
                   "as stored (default: an fp32 dequantized copy, the dtype Skulk's CPU runner runs)")
    p.add_argument("--engine", choices=("mlx", "llama_cpp"), default="mlx", help="the Skulk node's engine; "
                   "llama_cpp: against llama-server on the same GGUF file")
    p.add_argument("--mlx-too", action="store_true", help="with --engine llama_cpp: a third column, a Skulk "
                   "node on the MLX CPU path")
    ns = p.parse_args()
    levels = list(dict.fromkeys(int(c) for c in ns.concurrency.split(",") if c.strip()))
    root = Path(tempfile.mkdtemp(prefix="skulk-bench-tp-"))
    base_config = ns.skulk_config
    ns.skulk_config = node_config(base_config, root, ns.max_batch, ns.prefill_chunk, ns.engine)
    ns.mlx_config = node_config(base_config, root, ns.max_batch, ns.prefill_chunk, "mlx", "bench-skulk-mlx.yaml")
    try:
        if ns.model_dir:
            dirs = [d.resolve() for d in ns.model_dir]
        else:
            dirs = [build(s.strip(), root) for s in ns.sizes.split(",") if s.strip()]
        for d in dirs:
            bench_model(d, root, ns, levels)
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
