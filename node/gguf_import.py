"""Import a GGUF checkpoint (llama.cpp's and Ollama's format) as a model directory.

The metadata and the tensor list are read with llama.cpp's own `gguf` package (no tensor data is
loaded). Where mlx keeps every tensor as it is (F32, F16, Q4_0, Q4_1, Q8_0: `mx.load` gives the
quantized ones in mlx's own layout, uint32 `weight`, float16 `scales` and `biases`, groups of
32; an embedding or output tensor it widens to float16 is fine), the directory gets MLX
weights: llama.cpp's tensor names mapped onto mlx-lm's (`blk.N.attn_q` ->
`model.layers.N.self_attn.q_proj`), with the quantization per layer where bits differ.
llama.cpp's converter permutes the rows of Q and K for its interleaved rotary embedding:
`rope_traditional` makes mlx-lm rotate the same way (llama family); qwen2 is stored unpermuted.
Where it cannot (the K-quants, Q5_0, BF16, the IQ types: most GGUF files people download), the
directory is for llama.cpp only: no MLX weights, the card lists the llama.cpp engine alone.
Either way it gets `config.json` from the `<arch>.*` metadata, the tokenizer from
`tokenizer.ggml.*` (`gguf_tokenizer.py`), a model card (`README.md`) and the GGUF file itself;
an embedding GGUF (`<arch>.pooling_type` mean, first or last token) also gets sentence-transformers'
pooling files, which make its card an embedding model's.
Architectures without an MLX layout here (any but llama, mistral, qwen2, qwen3) are imported for
llama.cpp alone, which knows many more; for MLX weights unknown tensor names are refused by name. The result
is written beside the destination and renamed into place (`fetch.install_dir`), so nothing
half-written is left.

mlx and gguf are imported by the functions, not the module: the store role imports this module's
caller without ever loading them; an import runs in the CLI (`skulk model add`).
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

ARCHITECTURES = {"llama": ("llama", True), "mistral": ("llama", True), "qwen2": ("qwen2", False),
                 "qwen3": ("qwen3", False)}
"""GGUF `general.architecture` -> (mlx-lm model_type, rope_traditional): the ones MLX weights are
written for. Any other architecture is imported for llama.cpp alone (it may know it; if not, its
runner refuses the file at load with the reason)."""

LAYER_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
               "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
               "ffn_norm": "post_attention_layernorm", "attn_q_norm": "self_attn.q_norm",
               "attn_k_norm": "self_attn.k_norm"}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias|scales|biases)")
TOP = re.compile(r"(\w+)\.(weight|bias|scales|biases)")
GROUP_SIZE = 32  # every GGUF block type mlx reads quantizes in groups of 32
POOLING = {1: "mean_tokens", 2: "cls_token", 3: "lasttoken"}
"""An embedding GGUF's `<arch>.pooling_type` (llama.cpp's `llama_pooling_type`: 1 mean, 2 the first
token, 3 the last) -> sentence-transformers' `pooling_mode_*` key, which both engines read."""
RANK_POOLING = 4


class GGUFError(ValueError):
    """The file cannot be imported; the message names the file and the reason."""


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
    """A number from the metadata (None if absent); a per-layer list (some architectures give
    head counts or widths per layer) as its largest."""
    value = meta.get(key)
    if isinstance(value, list):
        value = max(value, default=None)
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


MLX_LAYOUT = frozenset({"F32", "F16", "Q4_0", "Q4_1", "Q8_0"})
"""GGUF tensor types mlx keeps as they are (the quantized ones in its own layout)."""
MLX_WIDENS = frozenset({"BF16", "Q4_K", "Q6_K"})
"""Types `mx.load` reads only by widening them to float16 (others, e.g. Q5_0, Q5_K, Q3_K, the IQ
types, it refuses): fine for the embedding and output tensors that llama-quantize keeps wider in
a Q4_0 file, not for every layer (a float16 copy three times the file's size, BF16's range lost)."""
EDGE_TENSORS = frozenset({"token_embd.weight", "output.weight"})
GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True, slots=True)
class Header:
    meta: dict[str, Any]
    tensors: dict[str, str]  # llama.cpp tensor name -> GGUF type name ("Q4_K", "F32", ...)


def read_header(path: Path) -> Header:
    """The file's metadata and tensor types (GGUFError for a file that is not GGUF or is cut short)."""
    import gguf

    try:
        reader = gguf.GGUFReader(path)
        meta = {name: field.contents() for name, field in reader.fields.items() if not name.startswith("GGUF.")}
        tensors = {t.name: t.tensor_type.name for t in reader.tensors}
    except Exception as exc:  # noqa: BLE001 - the reader reports a bad file as ValueError/IndexError/...
        with path.open("rb") as f:
            what = "cut short or damaged" if f.read(4) == GGUF_MAGIC else "no GGUF magic at its start"
        raise GGUFError(f"{path.name}: not a readable GGUF file ({what}: {exc})") from None
    return Header(meta, tensors)


def _config(path: Path, header: Header, for_mlx: bool) -> dict[str, Any]:
    """mlx-lm's config.json for the file's architecture (GGUFError on anything unsupported);
    `for_mlx`: every tensor must have a place in mlx-lm's model (llama.cpp alone reads others,
    such as Llama 3.1's `rope_freqs`)."""
    meta = header.meta
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise GGUFError(f"{path.name}: no general.architecture in its metadata")
    if for_mlx and arch not in ARCHITECTURES:
        raise GGUFError(f"{path.name}: architecture {arch!r} has no MLX layout here "
                        f"(MLX weights are written for {', '.join(sorted(ARCHITECTURES))})")
    for name in header.tensors if for_mlx else ():
        if mlx_name(name) is None:
            raise GGUFError(f"{path.name}: tensor {name!r} has no place in a {arch} model")
    if "token_embd.weight" not in header.tensors:
        raise GGUFError(f"{path.name}: no token_embd tensor")
    model_type, traditional = ARCHITECTURES.get(arch, (arch, False))
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
        "tie_word_embeddings": "output.weight" not in header.tensors,
        "torch_dtype": "float16",
    }
    head_dim = _num(meta, f"{arch}.attention.key_length") or hidden // heads
    if head_dim != hidden // heads or model_type == "qwen3":  # qwen3's config always names it
        config["head_dim"] = head_dim
    return config


def not_for_mlx(header: Header) -> list[str]:
    """The file's tensor types mlx has no layout for, most common first ([]: MLX weights are
    written; a widened embedding or output tensor does not count)."""
    kinds = [t for name, t in header.tensors.items()
             if t not in MLX_LAYOUT and not (name in EDGE_TENSORS and t in MLX_WIDENS)]
    return sorted(set(kinds), key=lambda t: (-kinds.count(t), t))


def file_type(meta: dict[str, Any]) -> str:
    """The file's quantization as llama.cpp names it (`general.file_type`: "q4_k_m"), or ""."""
    import gguf

    try:
        return gguf.LlamaFileType(int(meta["general.file_type"])).name.removeprefix("MOSTLY_").lower()
    except (KeyError, TypeError, ValueError):
        return ""


def mlx_weights(path: Path) -> dict[str, Any]:
    """The file's tensors under mlx-lm's names (GGUFError where mlx fails on them)."""
    import mlx.core as mx

    try:
        raw = cast("dict[str, mx.array]", mx.load(str(path), format="gguf"))
    except Exception as exc:  # noqa: BLE001 - mlx reports a bad file as RuntimeError/ValueError
        raise GGUFError(f"{path.name}: mlx cannot read its tensors ({exc})") from None
    weights: dict[str, Any] = {}
    for name, array in raw.items():
        if array.dtype not in (mx.float32, mx.float16, mx.bfloat16, mx.uint32):
            raise GGUFError(f"{path.name}: tensor {name!r} has type {array.dtype}, which mlx cannot use here")
        weights[cast(str, mlx_name(name))] = array
    return weights


def write_dir(path: Path, out: Path, model_id: str) -> dict[str, Any]:
    """Convert `path` into the model directory `out` (created); its config."""
    header = read_header(path)
    llama_only = not_for_mlx(header)
    mapped = header.meta.get("general.architecture") in ARCHITECTURES
    config = _config(path, header, for_mlx=mapped and not llama_only)
    try:
        ids = build(header.meta, out, int(config["max_position_embeddings"]))
    except TokenizerError as exc:
        raise GGUFError(f"{path.name}: {exc}") from None
    config.update({k: v for k, v in (("bos_token_id", ids["bos"]), ("eos_token_id", ids["eos"])) if v is not None})
    if (pooling := _pooling(path, header.meta)) is not None:
        write_embedding_files(out, pooling)
        config["pooling"] = pooling
    if llama_only or not mapped:  # no MLX weights: the card offers llama.cpp alone, and says why
        config["gguf_quantization"] = file_type(header.meta) or (llama_only or ["unknown"])[0].lower()
        config["gguf_only"] = (f"mlx has no layout of its own for {', '.join(llama_only)}" if mapped else
                               f"no MLX layout here for the {config['model_type']} architecture")
    else:
        import mlx.core as mx

        weights = mlx_weights(path)
        if (quant := quantization(weights)) is not None:
            config["quantization"] = quant
        mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "README.md").write_text(card_text(path, model_id, config, header.meta))
    keep_gguf(path, out / GGUF_FILE)
    return config


def _pooling(path: Path, meta: dict[str, Any]) -> str | None:
    """The pooling of an embedding GGUF (`<arch>.pooling_type`), None for a text model; a
    reranker's (rank pooling) is refused by name."""
    kind = _num(meta, f"{meta.get('general.architecture')}.pooling_type")
    if kind == RANK_POOLING:
        raise GGUFError(f"{path.name}: a reranker (pooling_type rank): only text and embedding models are served")
    return POOLING.get(kind) if kind else None


def write_embedding_files(out: Path, pooling: str) -> None:
    """sentence-transformers' files that mark a directory as an embedding model's and say how its
    token states are pooled (`model_cards.is_embedding_dir`, `embed_engine.pooling_of`)."""
    (out / "config_sentence_transformers.json").write_text(json.dumps({"similarity_fn_name": "cosine"}) + "\n")
    (out / "1_Pooling").mkdir(exist_ok=True)
    modes = {f"pooling_mode_{mode}": mode == pooling for mode in POOLING.values()}
    (out / "1_Pooling" / "config.json").write_text(json.dumps(modes, indent=2) + "\n")


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
             "- weights: " + (f"{quant['bits']}-bit, groups of {quant['group_size']}" if quant
                              else f"GGUF only, for llama.cpp ({config['gguf_only']})" if config.get("gguf_only")
                              else "unquantized"),
             f"- context: {config['max_position_embeddings']} tokens"]
    if config.get("pooling"):
        lines.append(f"- an embedding model: {config['pooling'].replace('_', ' ')} pooling")
    lines += [f"- {k.split('.', 1)[1]}: {v}" for k, v in fields.items()]
    return "\n".join(lines) + "\n"
