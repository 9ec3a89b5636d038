"""Runners of one machine share its cores (`services/runner/core_share.py`): an MLX runner on the
CPU steps with every core's BLAS thread while it is alone, half of them beside another busy runner,
changes them only once the step mlx-lm has in flight is done, and stops counting as busy once its
requests end. (The llama.cpp engines' share is checked in
`test_embeddings.py`, the share's arithmetic in `unit/test_core_share.py`.)"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.integration.patience import patience


def test_an_mlx_runner_steps_on_its_share_of_the_blas_threads(demo_model, tmp_path):
    out = subprocess.run([sys.executable, "-m", "tests.integration.mlx_core_share_check", str(demo_model),
                          str(tmp_path / "share")], capture_output=True, text=True, timeout=patience(120))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert "BLAS threads shared with the runners stepping at once" in got["path"], got
    assert got["beside"] and set(got["beside"]) == {2}, got  # 4 cores, two busy runners
    assert got["counted_when_done"] is False, got  # its requests ended: its share went back
    assert got["alone"] and set(got["alone"]) == {4}, got
    assert got["waited_for_the_generation_stream"], got  # never set under a running sgemm
