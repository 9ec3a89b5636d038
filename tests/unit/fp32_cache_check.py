"""Run by tests/unit/test_fp32_cache.py in a subprocess (mlx stays out of the pytest process):
the kept fp32 copy of a quantized model with a real mlx model. Prints the names of the checks
that passed, as JSON; an assertion that fails ends it with a traceback."""

from __future__ import annotations

import json
import logging
import sys
import tempfile
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from skulk.services.runner import fp32_cache


def quantized_model(seed: int = 0) -> nn.Module:
    mx.random.seed(seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.Linear(128, 64))
    nn.quantize(model, group_size=32, bits=4)
    return model


def dequantized(model: nn.Module) -> nn.Module:
    from mlx_lm.utils import dequantize_model

    out = dequantize_model(model)
    out.set_dtype(mx.float32)
    return out


def weights(model: nn.Module) -> dict:
    return dict(tree_flatten(model.parameters()))


def test_the_copy_is_kept_once_and_loaded_bit_for_bit(tmp_path: Path):
    (tmp_path / "model.safetensors").write_bytes(b"stored weights")
    computed = dequantized(quantized_model())
    mx.eval(computed.parameters())
    assert not fp32_cache.load(tmp_path, dequantized(quantized_model()))  # nothing kept yet
    fp32_cache.save(tmp_path, computed)
    fresh = dequantized(quantized_model(seed=1))  # other values: the copy must replace them all
    assert fp32_cache.load(tmp_path, fresh)
    want, got = weights(computed), weights(fresh)
    assert set(want) == set(got) and all(mx.array_equal(want[k], got[k]).item() for k in want)
    assert sorted(p.name for p in (tmp_path / fp32_cache.CACHE_DIR).iterdir()) == ["key.json", "model.safetensors"]


def test_a_changed_checkpoint_or_a_damaged_copy_is_computed_again(tmp_path: Path):
    stored = tmp_path / "model.safetensors"
    stored.write_bytes(b"stored weights")
    computed = dequantized(quantized_model())
    mx.eval(computed.parameters())
    fp32_cache.save(tmp_path, computed)
    stored.write_bytes(b"other stored weights")  # another size: another key
    assert not fp32_cache.load(tmp_path, dequantized(quantized_model()))
    fp32_cache.save(tmp_path, computed)
    (tmp_path / fp32_cache.CACHE_DIR / fp32_cache.WEIGHTS).write_bytes(b"not safetensors")
    assert not fp32_cache.load(tmp_path, dequantized(quantized_model()))
    (tmp_path / fp32_cache.CACHE_DIR / fp32_cache.KEY).write_text(json.dumps({"mlx": "0"}))
    assert not fp32_cache.load(tmp_path, dequantized(quantized_model()))


def test_a_directory_that_cannot_be_written_keeps_working(tmp_path: Path):
    (tmp_path / fp32_cache.CACHE_DIR).write_text("a file where the directory would go")
    computed = dequantized(quantized_model())
    mx.eval(computed.parameters())
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    fp32_cache.log.addHandler(handler)
    fp32_cache.save(tmp_path, computed)
    fp32_cache.log.removeHandler(handler)
    assert any("is not kept" in line for line in seen), seen
    assert not fp32_cache.load(tmp_path, dequantized(quantized_model()))


if __name__ == "__main__":
    passed = []
    for name, check in sorted((n, f) for n, f in globals().items() if n.startswith("test_")):
        with tempfile.TemporaryDirectory() as tmp:
            check(Path(tmp))
        passed.append(name)
    json.dump(passed, sys.stdout)
