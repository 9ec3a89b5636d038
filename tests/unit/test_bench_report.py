"""`bench_throughput`'s report: the table, the per-client decode rates beside it, the targets."""

from __future__ import annotations

import argparse

from tools.bench_report import LLAMA_SERVER, SKULK, Level, print_report


def level(agg: float, decode: float, tokens: float, p50: float = 1.0) -> Level:
    return Level(agg=agg, p50=p50, p90=p50, decode=decode, errors=0, chunks=tokens, tokens=tokens)


def test_the_report_compares_per_client_decode_rates_beside_the_aggregates(capsys):
    ns = argparse.Namespace(tokens=128, prompt_tokens=128, repeats=1)
    runs = {LLAMA_SERVER: {1: [level(25.0, 117.0, 13)], 8: [level(74.0, 12.0, 84, p50=3.6)]},
            SKULK: {1: [level(22.0, 105.3, 128)], 8: [level(70.4, 13.2, 96, p50=2.9)]}}
    print_report("m", ns, [1, 8], "alone", runs, None, LLAMA_SERVER)
    out = capsys.readouterr().out
    decode_rows = out.split("per-client decode")[1].splitlines()[1:3]
    assert decode_rows[0].split() == ["1", "|", LLAMA_SERVER, "117.0", "(13)", "|", SKULK, "105.3", "(128)",
                                      "|", "ratio", "0.900"], decode_rows
    assert decode_rows[1].endswith("ratio 1.100"), decode_rows
    assert "single-stream decode >= 0.95x llama-server C=1 decode MISS" in " ".join(out.split())
    assert "TTFT p50 at 8 <= llama-server's" in out and "PASS" in out
