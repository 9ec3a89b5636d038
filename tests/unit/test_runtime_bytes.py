"""What a runner holds for a model's weights on the CPU path (every parameter in fp32; a
quantized model is dequantized at load), counted from the safetensors headers alone, and used
by placement and previews instead of the files' size."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from skulk.node.model_cards import FP32_BYTES, card_from_dir, parameter_count, safetensors_header


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A safetensors file with these tensors' header (the data: zeros of the right size)."""
    width = {"F32": 4, "F16": 2, "BF16": 2, "U32": 4}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = width[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


QUANTIZED = {  # a 4-bit linear of 64 x 256 in groups of 32, an 8-bit embedding of 100 x 256, a norm
    "model.layers.0.mlp.up_proj.weight": ("U32", [64, 32]), "model.layers.0.mlp.up_proj.scales": ("F16", [64, 8]),
    "model.layers.0.mlp.up_proj.biases": ("F16", [64, 8]),
    "model.embed_tokens.weight": ("U32", [100, 64]), "model.embed_tokens.scales": ("F16", [100, 8]),
    "model.embed_tokens.biases": ("F16", [100, 8]),
    "model.norm.weight": ("F32", [256]),
}
QUANT = {"group_size": 32, "bits": 4, "model.embed_tokens": {"group_size": 32, "bits": 8}}


def test_a_quantized_model_counts_its_parameters_not_its_packed_words(tmp_path: Path):
    write_safetensors(tmp_path / "model.safetensors", QUANTIZED)
    tensors = safetensors_header(tmp_path / "model.safetensors")
    assert parameter_count(tensors, QUANT) == 64 * 256 + 100 * 256 + 256
    plain = {"w": {"dtype": "F16", "shape": [10, 20]}, "b": {"dtype": "F32", "shape": [10]}}
    assert parameter_count(plain, None) == 210  # an unquantized model: its elements


def test_the_card_carries_the_fp32_bytes_and_placement_takes_them(tmp_path: Path):
    model = tmp_path / "org--quant"
    model.mkdir()
    write_safetensors(model / "model.safetensors", QUANTIZED)
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 256,
                                                  "quantization": QUANT}))
    card = card_from_dir(model)
    assert card.runtime_bytes == FP32_BYTES * (64 * 256 + 100 * 256 + 256)
    assert card.memory_bytes == card.runtime_bytes > card.storage_size_bytes


def test_an_unreadable_header_falls_back_to_the_files_size(tmp_path: Path):
    model = tmp_path / "org--sparse"
    model.mkdir()
    with open(model / "model.safetensors", "wb") as f:
        f.truncate(1 << 20)  # zeros: no header
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 8}))
    card = card_from_dir(model)
    assert card.runtime_bytes == 0 and card.memory_bytes == card.storage_size_bytes == 1 << 20
