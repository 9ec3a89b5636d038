"""The demo model is built locally and deterministically, and is a real mlx-lm model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from skulk.node.model_cards import card_from_dir


def build(home: Path, seed: int) -> str:
    out = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "demo", "--kind", "tiny", "--home",
                          str(home), "--seed", str(seed)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.split("sha256 ")[1].rstrip(")\n")


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path: Path, demo_model: Path):
    a = build(tmp_path / "a", 0)
    b = build(tmp_path / "b", 0)
    c = build(tmp_path / "c", 1)
    assert a == b != c
    files = sorted(p.name for p in (tmp_path / "a" / "models" / "skulk--demo-tiny").iterdir())
    assert files == ["config.json", "model.safetensors", "model.safetensors.index.json",
                     "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]


def test_demo_card_supports_tensor_and_pipeline_sharding(demo_model: Path):
    card = card_from_dir(demo_model)
    assert card.model_id == "skulk/demo-tiny" and card.family == "qwen2" and card.supports_tensor
    assert card.n_layers == 4 and card.num_key_value_heads == 2 and card.context_length == 2048
    config = json.loads((demo_model / "config.json").read_text())
    assert config["num_attention_heads"] % 2 == 0 and config["num_key_value_heads"] % 2 == 0
    assert "chat_template" in json.loads((demo_model / "tokenizer_config.json").read_text())
