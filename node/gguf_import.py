"""Import a GGUF checkpoint (llama.cpp's and Ollama's format) as an MLX model directory.

mlx reads GGUF itself (`mx.load`): F32 and F16 tensors as they are, Q4_0, Q4_1 and Q8_0 already in
mlx's own quantized layout (uint32 `weight`, float16 `scales` and `biases`, groups of 32). What
this adds: llama.cpp's tensor names mapped onto mlx-lm's (`blk.N.attn_q` ->
`model.layers.N.self_attn.q_proj`), `config.json` from the `<arch>.*` metadata (with the
quantization per layer where bits differ), the tokenizer from `tokenizer.ggml.*`
(`gguf_tokenizer.py`), and a model card (`README.md`). llama.cpp's converter permutes the rows of
Q and K for its interleaved rotary embedding: `rope_traditional` makes mlx-lm rotate the same way
(llama family); qwen2 is stored unpermuted. Other architectures, tensor types mlx cannot read
(the K-quants) and unknown tensor names are refused by name. The result is written beside the
destination and renamed into place (`fetch.install_dir`), so nothing half-written is left.

mlx is imported by the functions, not the module: the store role imports this module's caller
without ever loading mlx; an import runs in the CLI (`skulk model add`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from skulk.node.gguf_tokenizer import TokenizerError, build
from skulk.wire.models import GGUF_FILE

ARCHITECTURES = {"llama": ("llama", True), "mistral": ("llama", True), "qwen2": ("qwen2", False)}
"""GGUF `general.architecture` -> (mlx-lm model_type, rope_traditional)."""

LAYER_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
               "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
               "ffn_norm": "post_attention_layernorm"}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias|scales|biases)")
TOP = re.compile(r"(\w+)\.(weight|bias|scales|biases)")
GROUP_SIZE = 32  # every GGUF block type mlx reads quantizes in groups of 32


class GGUFError(ValueError):
    """The file cannot be imported; the message names the file and the reason."""


@dataclass(frozen=True, slots=True)
class Imported:
    config: dict[str, Any]
    weights: dict[str, Any]


def mlx_name(name: str) -> str | None:
    """mlx-lm's name for a llama.cpp tensor name (None: not one we know)."""
    if m := BLOCK.fullmatch(name):
        layer, part, kind = m.groups()
        return f"model.layers.{layer}.{LAYER_NAMES[part]}.{kind}" if part in LAYER_NAMES else None
    if m := TOP.fullmatch(name):
        part, kind = m.groups()
        return f"{TOP_NAMES[part]}.{kind}" if part in TOP_NAMES else None
    return None


def _num(meta: dict[str, Any], key: str, kind: type = int) -> Any:
    value = meta.get(key)
    if value is None:
        return None
    return kind(value.item() if hasattr(value, "item") else value)


def quantization(weights: dict[str, Any]) -> dict[str, Any] | None:
    """mlx-lm's `quantization` config: the most common bits, and each layer that differs."""
    bits: dict[str, int] = {}
    for name, w in weights.items():
        if name.endswith(".scales"):
            layer = name[:-len(".scales")]
            bits[layer] = weights[f"{layer}.weight"].shape[-1] * 32 // (w.shape[-1] * GROUP_SIZE)
    if not bits:
        return None
    common = max(set(bits.values()), key=list(bits.values()).count)
    out: dict[str, Any] = {"group_size": GROUP_SIZE, "bits": common}
    out.update({layer: {"group_size": GROUP_SIZE, "bits": b} for layer, b in bits.items() if b != common})
    return out


def convert(path: Path) -> tuple[Imported, dict[str, Any]]:
    """The file as mlx-lm weights and config, and its metadata (GGUFError on anything else)."""
    import mlx.core as mx

    try:
        # return_metadata=True always gives (tensors, metadata): mlx's stub types all formats' results as one union
        raw, meta = cast("tuple[dict[str, mx.array], dict[str, Any]]",
                         mx.load(str(path), format="gguf", return_metadata=True))
    except Exception as exc:  # noqa: BLE001 - mlx reports a bad file as RuntimeError/ValueError
        raise GGUFError(f"{path.name}: not a GGUF file mlx can read ({exc})") from None
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise GGUFError(f"{path.name}: architecture {arch!r} is not supported "
                        f"(supported: {', '.join(sorted(ARCHITECTURES))})")
    model_type, traditional = ARCHITECTURES[arch]
    weights: dict[str, Any] = {}
    for name, array in raw.items():
        target = mlx_name(name)
        if target is None:
            raise GGUFError(f"{path.name}: tensor {name!r} has no place in a {arch} model")
        if array.dtype not in (mx.float32, mx.float16, mx.bfloat16, mx.uint32):
            raise GGUFError(f"{path.name}: tensor {name!r} has type {array.dtype}, which mlx cannot use here")
        weights[target] = array
    if "model.embed_tokens.weight" not in weights:
        raise GGUFError(f"{path.name}: no token_embd tensor")
    heads = _num(meta, f"{arch}.attention.head_count")
    hidden = _num(meta, f"{arch}.embedding_length")
    layers = _num(meta, f"{arch}.block_count")
    if not (heads and hidden and layers):
        raise GGUFError(f"{path.name}: the {arch}.* metadata lacks head_count/embedding_length/block_count")
    vocab = len(meta.get("tokenizer.ggml.tokens") or []) or _num(meta, f"{arch}.vocab_size")
    config: dict[str, Any] = {
        "model_type": model_type, "architectures": [f"{model_type.capitalize()}ForCausalLM"],
        "hidden_size": hidden, "num_hidden_layers": layers,
        "intermediate_size": _num(meta, f"{arch}.feed_forward_length"),
        "num_attention_heads": heads,
        "num_key_value_heads": _num(meta, f"{arch}.attention.head_count_kv") or heads,
        "rms_norm_eps": _num(meta, f"{arch}.attention.layer_norm_rms_epsilon", float) or 1e-5,
        "vocab_size": vocab,
        "max_position_embeddings": _num(meta, f"{arch}.context_length") or 4096,
        "rope_theta": _num(meta, f"{arch}.rope.freq_base", float) or 10000.0,
        "rope_traditional": traditional,
        "tie_word_embeddings": "lm_head.weight" not in weights,
        "torch_dtype": "float16",
    }
    if (head_dim := _num(meta, f"{arch}.attention.key_length")) and head_dim != hidden // heads:
        config["head_dim"] = head_dim
    if (quant := quantization(weights)) is not None:
        config["quantization"] = quant
    return Imported(config, weights), meta


def write_dir(path: Path, out: Path, model_id: str) -> dict[str, Any]:
    """Convert `path` into the model directory `out` (created); its config."""
    import mlx.core as mx

    imported, meta = convert(path)
    config = dict(imported.config)
    try:
        ids = build(meta, out, int(config["max_position_embeddings"]))
    except TokenizerError as exc:
        raise GGUFError(f"{path.name}: {exc}") from None
    config.update({k: v for k, v in (("bos_token_id", ids["bos"]), ("eos_token_id", ids["eos"])) if v is not None})
    mx.save_safetensors(str(out / "model.safetensors"), imported.weights, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "README.md").write_text(card_text(path, model_id, config, meta))
    keep_gguf(path, out / GGUF_FILE)
    return config


def keep_gguf(path: Path, dest: Path) -> None:
    """The GGUF file itself beside the MLX weights, for the llama.cpp engine: a hard link where
    both are on one file system (no second copy on disk), else a copy."""
    try:
        os.link(path, dest)
    except OSError:
        shutil.copyfile(path, dest)


def card_text(path: Path, model_id: str, config: dict[str, Any], meta: dict[str, Any]) -> str:
    """The model card: what it is and where it came from."""
    quant = config.get("quantization")
    fields = {k: meta.get(k) for k in ("general.name", "general.organization", "general.license",
                                         "general.size_label", "general.finetune") if isinstance(meta.get(k), str)}
    lines = [f"# {model_id}", "", f"Imported by Skulk from the GGUF file `{path.name}`.", "",
             f"- architecture: {config['model_type']} ({config['num_hidden_layers']} layers, hidden "
             f"{config['hidden_size']}, {config['num_attention_heads']} heads, "
             f"{config['num_key_value_heads']} kv heads, vocabulary {config['vocab_size']})",
             "- weights: " + (f"{quant['bits']}-bit, groups of {quant['group_size']}" if quant else "unquantized"),
             f"- context: {config['max_position_embeddings']} tokens"]
    lines += [f"- {k.split('.', 1)[1]}: {v}" for k, v in fields.items()]
    return "\n".join(lines) + "\n"
