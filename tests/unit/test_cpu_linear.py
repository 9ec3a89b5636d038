"""The decisions behind the CPU decode matmuls in row blocks (`cpu_linear`), as functions: when
the blocks are used, how a weight is cut, how rows are padded. Their arithmetic is checked
against mlx in `cpu_ops_check.py`."""

from __future__ import annotations

import pytest

from skulk.services.runner.cpu_linear import (
    MIN_AUTO_BYTES,
    SMALL_KERNEL_MN,
    SMALL_KERNEL_MNK,
    Choice,
    Mode,
    Reason,
    block_rows,
    by_exactness,
    by_timing,
    fits,
    mode_from_env,
    padded_rows,
    precheck,
)

BIG = 400 << 20


def test_precheck_keeps_sgemm_where_the_blocks_must_not_or_cannot_help():
    assert precheck(Mode.OFF, BIG, 16, False) == Choice(False, Reason.OFF)
    assert precheck(Mode.ON, 0, 16, False) == Choice(False, Reason.NO_FP32)
    assert precheck(Mode.ON, BIG, 17, False).reason is Reason.WIDE_BATCH  # a row would switch paths at 17
    assert precheck(Mode.ON, BIG, 16, True).reason is Reason.SHARDED  # every rank computes the logits
    assert precheck(Mode.AUTO, MIN_AUTO_BYTES - 1, 16, False).reason is Reason.CACHE_SIZED


def test_precheck_forces_or_leaves_it_to_timing():
    assert precheck(Mode.ON, 1, 16, False) == Choice(True, Reason.FORCED)
    assert precheck(Mode.AUTO, MIN_AUTO_BYTES, 16, False) is None


def test_the_blocks_must_save_a_tenth():
    assert by_timing(50.0, 40.0, 112).blocked
    assert by_timing(50.0, 45.0, 112).blocked
    assert not by_timing(50.0, 46.0, 112).blocked
    assert by_timing(50.0, 46.0, 112).reason is Reason.SLOWER
    assert "46.0 ms in blocks vs 50.0 ms sgemm through 112 weights" in by_timing(50.0, 46.0, 112).line()


def test_blocks_that_are_not_exact_here_are_never_taken():
    differs = "a row of 2048x768 differs by 2.4e-06 between a call of 1 row and one of 9"
    assert by_exactness(differs) == Choice(False, Reason.NOT_EXACT, differs)
    assert "sgemm (not exact on this CPU: a row of 2048x768" in by_exactness(differs).line()
    assert by_exactness("") is None  # exact: the switch or the timing decides


@pytest.mark.parametrize("value,mode", [(None, Mode.AUTO), ("", Mode.AUTO), ("auto", Mode.AUTO), ("1", Mode.ON),
                                        ("0", Mode.OFF), ("yes", Mode.AUTO)])
def test_the_environment_switch(value, mode):
    assert mode_from_env(value) is mode


def test_rows_are_padded_to_two_sizes_only():
    assert {padded_rows(r) for r in range(1, 9)} == {8}
    assert {padded_rows(r) for r in range(9, 17)} == {16}


@pytest.mark.parametrize("rows", [8, 16])
@pytest.mark.parametrize("n_out,n_in", [(2048, 768), (768, 2048), (256, 768), (673, 768), (151936, 896),
                                        (48, 32), (4864, 896), (896, 3904)])
def test_blocks_stay_within_the_small_kernel_and_cover_the_weight(rows, n_out, n_in):
    r = block_rows(rows, n_in, n_out)
    assert r == n_out or r % 16 == 0
    assert rows * r * n_in <= SMALL_KERNEL_MNK and (r == n_out or rows * r <= SMALL_KERNEL_MN)
    left = n_out % r
    assert rows * left * n_in <= SMALL_KERNEL_MNK  # the smaller last block too


def test_a_divisor_is_preferred_and_a_leftover_block_is_the_fallback():
    assert block_rows(8, 768, 2048) == 128  # 144 is the bound; 128 divides 2048
    assert block_rows(8, 768, 673) == 144  # nothing near divides 673: 4 blocks and 97 rows left
    assert block_rows(8, 32, 48) == 48  # one block holds it all


def test_a_weight_too_wide_for_a_16_row_block_at_16_rows_keeps_sgemm_at_every_batch_size():
    assert fits(3906) and not fits(3907)
    assert not fits(4864)  # Qwen2.5-0.5B's down_proj input
