"""`bench_throughput`'s figures: one level's measurements and the table with its targets."""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass

BASE, SKULK, SKULK_MLX = "mlx_lm.server", "Skulk", "Skulk MLX"  # the servers' names, in tables and logs
LLAMA_SERVER = "llama-server"


@dataclass
class Level:
    agg: float  # aggregate tok/s
    p50: float  # TTFT, seconds
    p90: float
    decode: float  # mean per-client decode tok/s, first to last content chunk
    errors: int
    chunks: float = 0.0  # mean content chunks per client
    tokens: float = 0.0  # mean completion tokens per client
    withheld: int = 0  # clients whose text came only at the end (no TTFT to measure)


def print_report(model: str, ns: argparse.Namespace, levels: list[int], mode: str,
                 runs: dict[str, dict[int, list[Level]]], sg: float | None, base: str) -> None:
    def val(name: str, c: int, key: str) -> float | None:
        """Median over the repeats of `key` at C=c; None where that server did not run it."""
        lv = runs.get(name, {}).get(c)
        return statistics.median(getattr(x, key) for x in lv) if lv else None

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    def fmt(v: float | None, spec: str, width: int) -> str:
        return ("n/a" if v is None or v != v else format(v, spec)).rjust(width)

    names = [base, SKULK] + [n for n in runs if n not in (base, SKULK)]
    print(f"\nmodel {model}: {ns.tokens} tokens/client, ~{ns.prompt_tokens}-token distinct prompts, "
          f"greedy, {ns.repeats} repeat(s), median; {mode}\n  tok/s = completion tokens of all clients / "
          f"(last end - first start); TTFT over clients whose text streamed (not withheld)")
    print(f"  {'C':>3} | " + " | ".join(f"{n + ' tok/s':>19} {'TTFT p50 (s)':>12} {'p90':>7}" for n in names)
          + f" | {'tok/s ratio':>11} {'TTFT ratio':>10} | errors/withheld")
    for c in levels:
        cells = [f"{fmt(val(n, c, 'agg'), '.1f', 19)} {fmt(val(n, c, 'p50'), '.3f', 12)} "
                 f"{fmt(val(n, c, 'p90'), '.3f', 7)}" for n in names]
        rat = [fmt(ratio(val(SKULK, c, k), val(base, c, k)), ".3f", w) for k, w in (("agg", 11), ("p50", 10))]
        errs = "/".join(str(sum(getattr(x, k) for by_c in runs.values() for x in by_c.get(c, [])))
                        for k in ("errors", "withheld"))
        print(f"  {c:>3} | " + " | ".join(cells) + f" | {rat[0]} {rat[1]} | {errs}")
    # Greedy answers to one prompt end at different lengths on different servers (near-ties flip with
    # the batch shape), which moves the aggregates above; each client's own decode rate does not.
    print("  per-client decode tok/s (first to last content chunk), tokens per client in brackets:")
    for c in levels:
        cells = [f"{n} {fmt(val(n, c, 'decode'), '.1f', 6)} ({fmt(val(n, c, 'tokens'), '.0f', 1)})" for n in names]
        print(f"  {c:>3} | " + " | ".join(cells)
              + f" | ratio {fmt(ratio(val(SKULK, c, 'decode'), val(base, c, 'decode')), '.3f', 5)}")
    agg8, ttft8 = ratio(val(SKULK, 8, "agg"), val(base, 8, "agg")), ratio(val(SKULK, 8, "p50"), val(base, 8, "p50"))
    if base == LLAMA_SERVER:  # the single stream against llama-server's own C=1 decode
        sg, against = val(base, 1, "decode"), "llama-server C=1 decode"
    else:
        against = "in-process stream_generate"
    single = ratio(val(SKULK, 1, "decode"), sg)
    print(f"  single stream: {against} {fmt(sg, '.1f', 7)} tok/s, Skulk C=1 decode "
          f"{fmt(val(SKULK, 1, 'decode'), '.1f', 7)} tok/s, ratio {fmt(single, '.3f', 5)}")
    targets = [(f"aggregate at 8 >= 1.2x {base}", None if agg8 is None else agg8 >= 1.2),
               (f"TTFT p50 at 8 <= {base}'s", None if ttft8 is None else ttft8 <= 1.0),
               (f"single-stream decode >= 0.95x {against}", None if single is None else single >= 0.95)]
    for name, ok in targets:
        print(f"  target {name:<48} {'n/a' if ok is None else 'PASS' if ok else 'MISS'}")
