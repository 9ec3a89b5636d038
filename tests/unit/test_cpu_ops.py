"""The runner's faster CPU attention, SwiGLU, RoPE and decode matmuls give mlx's own results (checked in a
subprocess: mlx stays out of the pytest process)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_fast_cpu_attention_swiglu_and_rope_match_mlx():
    run = subprocess.run([sys.executable, "-m", "tests.unit.cpu_ops_check"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    diffs = json.loads(run.stdout)
    assert len(diffs) >= 15
    rope = {case: d for case, d in diffs.items() if case.startswith("rope")}
    assert len(rope) == 16 and not any(rope.values()), rope  # bit-identical to mx.fast.rope
    alone = {case: d for case, d in diffs.items() if case.startswith("blocked alone")}
    assert len(alone) == 10 and not any(alone.values()), alone  # a row's result ignores the batch
    bad = {case: d for case, d in diffs.items() if not d <= 1e-5}
    assert not bad, bad
