"""The kept fp32 copy of a quantized model (services/runner/fp32_cache.py), with a real mlx model
(in a subprocess: mlx stays out of the pytest process): computed once, then loaded bit for bit;
a changed checkpoint or a damaged copy is computed again; a directory that cannot be written
keeps working."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_fp32_copy_is_kept_loaded_bit_for_bit_and_computed_again_when_stale():
    run = subprocess.run([sys.executable, "-m", "tests.unit.fp32_cache_check"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [
        "test_a_changed_checkpoint_or_a_damaged_copy_is_computed_again",
        "test_a_directory_that_cannot_be_written_keeps_working",
        "test_the_copy_is_kept_once_and_loaded_bit_for_bit",
    ]
