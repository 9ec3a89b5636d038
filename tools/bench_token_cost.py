"""Benchmark: what a generated token costs outside the model, per role, on one node.

    python -m tools.bench_token_cost [--sizes 100m|tiny|smollm2] [--concurrency 1,8] [--tokens 128]
        [--prompt-tokens 128] [--repeats 2]

One real node serves the model (`skulk run --place`, as `bench_throughput` starts it). For each
concurrency C, C clients stream a greedy chat completion each (distinct seeded prompts, as in
`bench_throughput`), and every process of the node is charged its CPU seconds over the level
(psutil, user + system), divided by the tokens generated: the runner's split into the model's
steps (the CPU its engine steps took, all threads: `RunnerReport.step_cpu_s`) and its loop
around them (scheduling, detokenizing, stop strings, token frames, heartbeats), then the API
(gunicorn's arbiter and worker: HTTP, SSE framing, the runner link), the master, the
supervisor, and every other role. On a 2-core machine whatever is not the model's step is taken
from it. It prints figures; it asserts none.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import psutil
import zmq

from skulk.wire import codec, endpoints
from skulk.wire.events import RunnerReport
from skulk.wire.sockets import make_socket
from skulk.wire.topics import EVT_RUNNER
from tools import bench_models
from tools.bench_throughput import SKULK, build_prompts, run_level, skulk_server


def role_of(proc: psutil.Process) -> str:
    title = " ".join(" ".join(proc.cmdline()).split()) or proc.name()  # setproctitle pads with spaces
    if title.startswith("skulk: "):
        role = title.removeprefix("skulk: ")
        return "runner" if role.startswith("runner") else role
    return "supervisor" if "skulk.scripts.cli" in title else title[:30]


def cpu_by_role(root_pid: int) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    root = psutil.Process(root_pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            out[role_of(proc)] += times.user + times.system
        except psutil.Error:
            continue
    return dict(out)


class RunnerSteps:
    """The runner's latest `RunnerReport` from the node's bus: its step CPU and token counters."""

    def __init__(self, home: Path) -> None:
        self.sock = make_socket(zmq.Context.instance(), zmq.SUB, hwm=100000, subscribe=(EVT_RUNNER.prefix,),
                                connect=endpoints.bus_capture(endpoints.run_dir(home.resolve())))
        self.last: RunnerReport | None = None

    def settle(self, tokens_at_least: int, deadline_s: float = 30.0) -> RunnerReport:
        """The first report whose token counter has reached `tokens_at_least` with an empty batch."""
        deadline = time.monotonic() + deadline_s
        while (left := deadline - time.monotonic()) > 0:
            if self.sock.poll(int(left * 1000) + 1, zmq.POLLIN):
                msg = codec.decode(self.sock.recv_multipart()[1])
                if isinstance(msg, RunnerReport):
                    self.last = msg
                    if msg.tokens_total >= tokens_at_least and msg.active == 0 and msg.waiting == 0:
                        return msg
        raise TimeoutError("no settled RunnerReport from the runner")


def measure(port: int, model: str, prompts: list[str], tokens: int, pid: int, steps: RunnerSteps) -> dict[str, float]:
    before_report = steps.settle(steps.last.tokens_total if steps.last else 0)
    before = cpu_by_role(pid)
    level = run_level(port, model, prompts, tokens)
    after_report = steps.settle(before_report.tokens_total + 1)
    after = cpu_by_role(pid)
    made = after_report.tokens_total - before_report.tokens_total
    spent = {role: after.get(role, 0.0) - before.get(role, 0.0) for role in after}
    # (a build from before RunnerReport carried step_cpu_s: the runner's whole CPU counts as its loop)
    model_s = getattr(after_report, "step_cpu_s", 0.0) - getattr(before_report, "step_cpu_s", 0.0)
    runner_s = spent.pop("runner", 0.0)
    row = {"tokens": float(made), "agg tok/s": level.agg, "runner (all)": runner_s / made * 1e3,
           "runner: model steps": model_s / made * 1e3,
           "runner: loop around them": (runner_s - model_s) / made * 1e3}
    for role, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        row[role] = seconds / made * 1e3
    row["everything but the model"] = sum(v for k, v in row.items()
                                          if k not in ("tokens", "agg tok/s", "runner (all)", "runner: model steps"))
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100m")
    p.add_argument("--concurrency", default="1,8")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2)
    ns = p.parse_args()
    levels = [int(c) for c in ns.concurrency.split(",")]
    root = Path(tempfile.mkdtemp(prefix="skulk-bench-token-cost-"))
    try:
        model_dir = bench_models.build(ns.sizes, root)
        model = model_dir.name.replace("--", "/", 1)
        prompts, warm = build_prompts(model_dir, ns.prompt_tokens, levels, ns.repeats)
        server = skulk_server(root / "home", model_dir, model, None)
        server.start(warm[SKULK], ns.tokens)
        assert server.proc is not None
        steps = RunnerSteps(root / "home")
        try:
            for c in levels:
                rows = [measure(server.port, model, prompts[(c, r)], ns.tokens, server.proc.pid, steps)
                        for r in range(ns.repeats)]
                print(f"{model}, {c} concurrent stream(s) of {ns.tokens} tokens: CPU ms per generated token "
                      f"(median of {ns.repeats})")
                for key in rows[0]:
                    value = statistics.median(r.get(key, 0.0) for r in rows)
                    print(f"  {key:28s} {value:9.2f}")
        finally:
            steps.sock.close(0)
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
