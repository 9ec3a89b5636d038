"""The runner's faster CPU attention, SwiGLU, RoPE and decode matmuls give mlx's own results (checked in a
subprocess: mlx stays out of the pytest process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_fast_cpu_attention_swiglu_and_rope_match_mlx(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}  # the decode-matmul check measured here, then kept
    run = subprocess.run([sys.executable, "-m", "tests.unit.cpu_ops_check"], capture_output=True,
                         text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    diffs = json.loads(run.stdout)
    assert len(diffs) >= 15
    rope = {case: d for case, d in diffs.items() if case.startswith("rope")}
    assert len(rope) == 16 and not any(rope.values()), rope  # bit-identical to mx.fast.rope
    # The row blocks' promise, on whatever CPU runs this: the runner's check at load finds a
    # weight exact only where a row's bits ignore the batch (1..16 rows), and takes the blocks
    # (forced, on a tiny model) only where exact; where this BLAS has no exact kernel it keeps sgemm.
    alone = {case[len("blocked alone "):]: d for case, d in diffs.items() if case.startswith("blocked alone")}
    check = {case[len("blocked check "):]: d for case, d in diffs.items() if case.startswith("blocked check")}
    assert len(alone) == len(check) == 10
    assert all(alone[case] == 0.0 for case, exact in check.items() if exact), (alone, check)
    assert all(not exact for case, exact in check.items() if alone[case] > 0.0), (alone, check)
    exact_here = diffs.pop("blocked exact here")
    print("this CPU's BLAS computes a row " + ("the same in every batch: the exact-kernel path was checked, row blocks "
          "taken" if exact_here else "differently by batch size: the runner was checked to keep sgemm"))
    bad = {case: d for case, d in diffs.items()
           if not case.startswith(("blocked alone", "blocked check")) and not d <= 1e-5}
    assert not bad, bad
