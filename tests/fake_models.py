"""A small fake model directory (config.json, fake weights, a few files) for store tests:
`card_from_dir` accepts it; nothing loads it."""

from __future__ import annotations

import json
import random
from pathlib import Path

WEIGHTS_BYTES = 300_000


def make_model(root: Path, dir_name: str = "org--tiny", seed: int = 0) -> Path:
    """`root/dir_name/` with config.json, model.safetensors (random bytes), tokenizer files
    and a nested file; returns the directory."""
    d = root / dir_name
    (d / "sub").mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2,
                                               "hidden_size": 64, "num_attention_heads": 4,
                                               "max_position_embeddings": 512}))
    (d / "model.safetensors").write_bytes(random.Random(seed).randbytes(WEIGHTS_BYTES))
    (d / "tokenizer.json").write_text('{"version": "1.0"}')
    (d / "sub" / "notes.txt").write_text("nested file\n")
    return d
