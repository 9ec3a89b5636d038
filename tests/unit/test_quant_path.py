"""Quantized or bf16 on a GPU (pure): the faster path where the bf16 copy fits, or as forced."""

from __future__ import annotations

from skulk.services.runner.quant_path import QuantMode, choose

GIB = 2**30


def test_bf16_serves_where_it_fits_and_decodes_clearly_faster():
    got = choose(QuantMode.AUTO, 14 * GIB, 120 * GIB, quant_ms=140.0, bf16_ms=15.0)
    assert got.dequantize and "140.0 ms quantized vs 15.0 ms bf16" in got.why


def test_the_quantized_model_stays_when_bf16_is_not_clearly_faster_or_does_not_fit():
    assert not choose(QuantMode.AUTO, 14 * GIB, 120 * GIB, quant_ms=20.0, bf16_ms=19.0).dequantize  # < 10 %
    tight = choose(QuantMode.AUTO, 14 * GIB, 10 * GIB, quant_ms=140.0, bf16_ms=15.0)
    assert not tight.dequantize and "needs 14.0 GiB, 10.0 GiB free" in tight.why
    assert not choose(QuantMode.AUTO, 14 * GIB, None).dequantize  # free memory unknown: no copy


def test_config_forces_either_way_but_never_past_the_memory():
    assert not choose(QuantMode.KEEP, 1, 100 * GIB, 100.0, 1.0).dequantize
    assert choose(QuantMode.DEQUANTIZE, 14 * GIB, 20 * GIB).dequantize
    assert not choose(QuantMode.DEQUANTIZE, 14 * GIB, 2 * GIB).dequantize
