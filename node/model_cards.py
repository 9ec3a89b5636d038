"""Model directories into cards (`<models>/<org>--<name>/config.json`): the store role reads
them for the catalog, the API its own node's at start (listed before the catalog has them),
`skulk model add` to validate a model. A real model copied into a models
dir or the store gets a card the same way the demo model does.

A directory may name its companions (a drafter, an MTP sidecar, split vision weights) in
`skulk.json`: `{"companions": ["org/name", ...]}`; they are staged with it and count as in use
while it is.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from skulk.wire.models import GGUF_FILE, EngineKind, ModelCard, ModelDirError, ModelTask, dir_name

TENSOR_FAMILIES = frozenset({"qwen2", "qwen3", "llama", "mistral", "phi3", "gemma2", "gemma3",
                             "deepseek_v2", "deepseek_v3", "qwen3_moe", "olmo2", "glm4"})
"""Families whose mlx-lm model class implements `shard(group)` (tensor parallelism)."""

PIPELINE_FAMILIES = frozenset({"qwen2", "qwen3_moe", "qwen3_next", "qwen3_5", "deepseek_v2", "deepseek_v3",
                               "deepseek_v32", "glm4_moe", "glm4_moe_lite", "ministral3", "mistral4", "kimi_k3",
                               "bailing_hybrid"})
"""Families whose mlx-lm model class has `pipeline(group)` (mlx-lm 0.32's PipelineMixin)."""

LLAMA_LAYOUT = frozenset({"llama", "mistral"})
"""Families whose mlx-lm class is its llama one: no `pipeline`, and a `shard` that needs the heads
to divide by the ring's size. The runner splits them itself (`services/runner/llama_split.py`):
a pipeline of layer runs, and tensor splits by whole key-value head groups (a ring no wider
than the key-value heads)."""


EMBEDDING_MARKERS = ("config_sentence_transformers.json", "modules.json")
"""sentence-transformers' files: a model directory holding one is an embedding model (as
mlx-community's embedding conversions and the demo embedding model are)."""


CARD_EXTRAS = "skulk.json"
"""Our own additions to a model directory (its companions)."""


def companions_of(directory: Path) -> tuple[str, ...]:
    """The companions `skulk.json` names (each a valid `org/name`), or ModelDirError."""
    try:
        extra = json.loads((directory / CARD_EXTRAS).read_text())
    except FileNotFoundError:
        return ()
    except (OSError, ValueError) as exc:
        raise ModelDirError(f"{directory.name}: unreadable {CARD_EXTRAS}: {exc}") from None
    names = extra.get("companions", []) if isinstance(extra, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ModelDirError(f"{directory.name}: {CARD_EXTRAS} companions must be a list of model ids")
    for name in names:
        dir_name(name)  # org/name or ModelDirError
    return tuple(names)


def drafter_of(directory: Path) -> str:
    """The drafter `skulk.json` names (`runtime.assistant_model_repo`, upstream's key), or ""."""
    try:
        extra = json.loads((directory / CARD_EXTRAS).read_text())
    except (OSError, ValueError):
        return ""
    runtime = extra.get("runtime") if isinstance(extra, dict) else None
    name = runtime.get("assistant_model_repo") if isinstance(runtime, dict) else None
    return name if isinstance(name, str) else ""


def model_id_of(directory: Path) -> str:
    org, sep, name = directory.name.partition("--")
    if not sep or not org or not name:
        raise ModelDirError(f"{directory.name}: expected a directory named <org>--<name>")
    return f"{org}/{name}"


def is_embedding_dir(directory: Path) -> bool:
    return any((directory / marker).is_file() for marker in EMBEDDING_MARKERS)


FP32_BYTES = 4
DTYPE_ELEMENTS = frozenset({"F32", "F16", "BF16", "F64", "I8", "U8", "I16", "I32", "I64"})


def safetensors_header(path: Path) -> dict[str, Any]:
    """The tensors a safetensors file declares (name -> {dtype, shape}); {} if unreadable."""
    try:
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if not 0 < size <= 100 << 20:
                return {}
            header = json.loads(f.read(size))
    except (OSError, ValueError, struct.error):
        return {}
    return {k: v for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)} \
        if isinstance(header, dict) else {}


def parameter_count(tensors: dict[str, Any], quantization: Any) -> int:
    """Parameters of a model from its tensors: a quantized weight (uint32, with `.scales`) counts
    its rows times its groups times the group size; its scales and biases count nothing."""
    def group(layer: str) -> int:
        own = quantization.get(layer) if isinstance(quantization, dict) else None
        size = (own if isinstance(own, dict) else quantization or {}).get("group_size", 64)
        return int(size)

    total = 0
    for name, spec in tensors.items():
        shape = spec.get("shape") or []
        n = 1
        for d in shape:
            n *= int(d)
        base = name.rsplit(".", 1)[0]
        if name.endswith((".scales", ".biases")) and f"{base}.weight" in tensors \
                and tensors[f"{base}.weight"].get("dtype") == "U32":
            continue
        if spec.get("dtype") == "U32" and f"{base}.scales" in tensors and shape:
            scales = tensors[f"{base}.scales"].get("shape") or [0]
            total += n // int(shape[-1]) * int(scales[-1]) * group(base)
        elif spec.get("dtype") in DTYPE_ELEMENTS:
            total += n
    return total


def runtime_bytes(weights: list[Path], config: dict[str, Any]) -> int:
    """fp32 bytes of every parameter (what the CPU path holds); 0 when a header is unreadable."""
    tensors: dict[str, Any] = {}
    for path in weights:
        header = safetensors_header(path)
        if not header:
            return 0
        tensors.update(header)
    quant = config.get("quantization") or config.get("quantization_config")
    return FP32_BYTES * parameter_count(tensors, quant)


def card_from_dir(directory: Path) -> ModelCard:
    """The card of one model directory, or ModelDirError with the reason."""
    model_id = model_id_of(directory)
    try:
        config = json.loads((directory / "config.json").read_text())
    except FileNotFoundError:
        raise ModelDirError(f"{directory.name}: no config.json") from None
    except (OSError, ValueError) as exc:
        raise ModelDirError(f"{directory.name}: unreadable config.json: {exc}") from None
    if not isinstance(config, dict):
        raise ModelDirError(f"{directory.name}: config.json is not an object")
    sub = config.get("text_config")
    text: dict[str, Any] = sub if isinstance(sub, dict) else config
    weights = sorted(directory.glob("*.safetensors"))
    gguf = directory / GGUF_FILE  # llama.cpp runs the file
    gguf_only = not weights and gguf.is_file()  # a GGUF mlx cannot read: llama.cpp's alone
    if not weights and not gguf_only:
        raise ModelDirError(f"{directory.name}: no *.safetensors weights (and no {GGUF_FILE})")
    try:
        n_layers = int(text["num_hidden_layers"])
        hidden = int(text["hidden_size"])
    except (KeyError, TypeError, ValueError):
        raise ModelDirError(f"{directory.name}: config.json lacks num_hidden_layers/hidden_size") from None
    if n_layers <= 0 or hidden <= 0:
        raise ModelDirError(f"{directory.name}: n_layers and hidden_size must be positive")
    kv = text.get("num_key_value_heads", text.get("num_attention_heads"))
    quant = config.get("quantization") or config.get("quantization_config")
    if isinstance(quant, dict) and quant.get("bits"):
        quantization = f"{quant['bits']}bit"
    else:
        quantization = str(config.get("gguf_quantization") or config.get("torch_dtype") or "unknown")
    family = str(config.get("model_type", "unknown"))
    embedding = is_embedding_dir(directory)
    mlx = () if gguf_only else (EngineKind.MLX.value,)
    return ModelCard(
        model_id=model_id,
        storage_size_bytes=gguf.stat().st_size if gguf_only else sum(w.stat().st_size for w in weights),
        runtime_bytes=gguf.stat().st_size if gguf_only else runtime_bytes(weights, config),
        n_layers=n_layers, hidden_size=hidden,
        num_key_value_heads=int(kv) if isinstance(kv, int) else None,
        supports_tensor=family in TENSOR_FAMILIES,
        supports_pipeline=family in PIPELINE_FAMILIES | LLAMA_LAYOUT,
        context_length=int(text.get("max_position_embeddings") or 0),
        family=family, quantization=quantization,
        tasks=((ModelTask.TEXT_EMBEDDING if embedding else ModelTask.TEXT_GENERATION).value,),
        companions=companions_of(directory), drafter=drafter_of(directory),
        engines=mlx + ((EngineKind.LLAMA_CPP.value,) if gguf.is_file() else ()),
        gguf_bytes=gguf.stat().st_size if gguf.is_file() else 0)


def scan(models_dir: Path) -> tuple[dict[str, ModelCard], dict[str, str]]:
    """Every usable model under `models_dir` (by id) and every rejected directory (with why)."""
    cards: dict[str, ModelCard] = {}
    rejected: dict[str, str] = {}
    if not models_dir.is_dir():
        return cards, rejected
    for entry in sorted(models_dir.iterdir()):
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        try:
            card = card_from_dir(entry)
            cards[card.model_id] = card
        except ModelDirError as exc:
            rejected[entry.name] = str(exc)
    return cards, rejected
