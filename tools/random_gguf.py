"""A random-weight llama GGUF of a chosen shape, for benchmarks where no real checkpoint of that
size can be fetched (a GPU machine with no network).

    python -m tools.random_gguf dump-tokenizer FROM.gguf TOKENIZER.json
    python -m tools.random_gguf make TOKENIZER.json OUT.gguf [--hidden 4096 --layers 32 --heads 32
        --kv-heads 8 --ffn 14336 --context 8192 --arch llama|qwen3|granite|bert --std 0.02 --embed-std 0.02]

Speed depends on a model's shape, not on what its weights say, so a random model of Llama-3-8B's
shape decodes as fast as the real one (its answers are nonsense, and it may stop early on a random
end-of-text). The tokenizer (every `tokenizer.*` key) is copied from a real GGUF once
(`dump-tokenizer`, a few MB of JSON that travels where the real file need not), so `skulk model add`
imports the result like any GGUF. The file is F16 (norms F32), written one tensor at a time
(memory: one tensor); `llama-quantize` makes the quantized copies. Weights are drawn on a CUDA
device when torch has one (an 8B model in seconds), else with numpy.

`--arch qwen3` adds the per-head query and key norms; `--arch granite` the four scales llama.cpp
requires of it (all 1); `--arch bert` is an encoder of BERT's kind (an embedding model pooled on its
first token, with a WordPiece tokenizer's keys). Larger `--std`/`--embed-std` make a small model's
greedy choices decisive (the suite compares two engines' answers on such a model: near-ties would
make that moot).

Uses llama.cpp's own `gguf` package (a dependency of the project; on a machine without the
project installed, llama.cpp's source tree has it as `gguf-py`, put on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

STD = 0.02  # the scale of a trained model's weights: activations stay finite through every layer


def dump_tokenizer(src: Path, out: Path) -> int:
    """Every `tokenizer.*` key of `src` with its GGUF types, as JSON; the number of keys."""
    import gguf

    reader = gguf.GGUFReader(src)
    fields = []
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        types = [int(t) for t in field.types]
        value = field.contents()
        fields.append({"name": name, "types": types, "value": value})
    out.write_text(json.dumps(fields))
    return len(fields)


Shape = tuple[int, ...]


ARCHS = ("llama", "qwen3", "granite", "bert")
TOKEN_TYPES = 2  # BERT's segment embeddings ("sentence A" and "B"): llama.cpp reads only the first
F32_TENSORS = ("position_embd.weight", "token_types.weight")
"""Kept in float32 as llama.cpp's converter keeps them (its CPU adds them to float32 activations)."""


def shapes(hidden: int, layers: int, heads: int, kv_heads: int, ffn: int, vocab: int,
           arch: str = "llama") -> list[tuple[str, Shape]]:
    """Every tensor of the model (HF's (out, in) order; gguf reverses it), embeddings tied."""
    if arch == "bert":
        return bert_shapes(hidden, layers, ffn, vocab)
    head_dim = hidden // heads
    out: list[tuple[str, Shape]] = [("token_embd.weight", (vocab, hidden))]
    for i in range(layers):
        b = f"blk.{i}."
        if arch == "qwen3":
            out += [(b + "attn_q_norm.weight", (head_dim,)), (b + "attn_k_norm.weight", (head_dim,))]
        out += [(b + "attn_norm.weight", (hidden,)), (b + "attn_q.weight", (heads * head_dim, hidden)),
                (b + "attn_k.weight", (kv_heads * head_dim, hidden)),
                (b + "attn_v.weight", (kv_heads * head_dim, hidden)),
                (b + "attn_output.weight", (hidden, heads * head_dim)), (b + "ffn_norm.weight", (hidden,)),
                (b + "ffn_gate.weight", (ffn, hidden)), (b + "ffn_up.weight", (ffn, hidden)),
                (b + "ffn_down.weight", (hidden, ffn))]
    out.append(("output_norm.weight", (hidden,)))
    return out


def bert_shapes(hidden: int, layers: int, ffn: int, vocab: int, context: int = 512) -> list[tuple[str, Shape]]:
    """A BERT encoder as llama.cpp loads one: learned positions and segment embeddings, layer
    norms and biases everywhere, no output layer (an embedding model)."""
    out: list[tuple[str, Shape]] = [("token_embd.weight", (vocab, hidden)),
                                    ("token_types.weight", (TOKEN_TYPES, hidden)),
                                    ("position_embd.weight", (context, hidden)),
                                    ("token_embd_norm.weight", (hidden,)), ("token_embd_norm.bias", (hidden,))]
    for i in range(layers):
        b = f"blk.{i}."
        for name, rows, cols in (("attn_q", hidden, hidden), ("attn_k", hidden, hidden), ("attn_v", hidden, hidden),
                                 ("attn_output", hidden, hidden), ("ffn_up", ffn, hidden), ("ffn_down", hidden, ffn)):
            out += [(f"{b}{name}.weight", (rows, cols)), (f"{b}{name}.bias", (rows,))]
        for norm in ("attn_output_norm", "layer_output_norm"):
            out += [(f"{b}{norm}.weight", (hidden,)), (f"{b}{norm}.bias", (hidden,))]
    return out


def _drawer() -> Any:
    """A function (shape, std) -> random F16 numpy array (on the GPU where torch has one)."""
    try:
        import torch

        if torch.cuda.is_available():
            gen = torch.Generator(device="cuda").manual_seed(0)
            half = torch.float16
            return lambda shape, std: (torch.randn(shape, generator=gen, device="cuda", dtype=half)
                                       * std).cpu().numpy()
    except ImportError:
        pass
    rng = np.random.default_rng(0)
    return lambda shape, std: np.multiply(rng.standard_normal(shape, dtype=np.float32), std).astype(np.float16)


def make(tokenizer: Path, out: Path, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int,
         context: int, arch: str = "llama", std: float = STD, embed_std: float = STD) -> int:
    """Write the model; its parameter count."""
    import gguf

    if arch not in ARCHS:
        raise ValueError(f"arch {arch!r}: one of {', '.join(ARCHS)}")
    fields = json.loads(tokenizer.read_text())
    vocab = next(len(f["value"]) for f in fields if f["name"] == "tokenizer.ggml.tokens")
    w = gguf.GGUFWriter(out, arch)
    w.add_name(f"random {arch} {hidden}x{layers}")
    w.add_context_length(context)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_vocab_size(vocab)
    if arch == "bert":  # an encoder: layer norms, no rotary positions, pooled (first token: bge's way)
        w.add_layer_norm_eps(1e-12)
        w.add_causal_attention(False)
        w.add_pooling_type(gguf.PoolingType.CLS)
        w.add_token_type_count(TOKEN_TYPES)
    else:
        w.add_head_count_kv(kv_heads)
        w.add_rope_dimension_count(hidden // heads)
        w.add_rope_freq_base(500000.0)
        w.add_layer_norm_rms_eps(1e-5)
    if arch == "qwen3":
        w.add_key_length(hidden // heads)
        w.add_value_length(hidden // heads)
    if arch == "granite":
        for add in (w.add_logit_scale, w.add_residual_scale, w.add_embedding_scale, w.add_attention_scale):
            add(1.0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for f in fields:
        types = [gguf.GGUFValueType(t) for t in f["types"]]
        w.add_key_value(f["name"], f["value"], types[0], sub_type=types[-1] if len(types) > 1 else None)
    tensors = bert_shapes(hidden, layers, ffn, vocab, context) if arch == "bert" else \
        shapes(hidden, layers, heads, kv_heads, ffn, vocab, arch)
    for name, shape in tensors:
        dtype = np.float32 if len(shape) == 1 or name in F32_TENSORS else np.float16
        w.add_tensor_info(name, shape, np.dtype(dtype), int(np.prod(shape)) * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    draw = _drawer()
    for name, shape in tensors:
        if name.endswith(".bias") or name in F32_TENSORS:
            w.write_tensor_data(draw(shape, std).astype(np.float32))
        else:
            w.write_tensor_data(np.ones(shape, dtype=np.float32) if len(shape) == 1 else
                                draw(shape, embed_std if name == "token_embd.weight" else std))
    w.close()
    return sum(int(np.prod(s)) for _, s in tensors)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump-tokenizer")
    d.add_argument("src", type=Path)
    d.add_argument("out", type=Path)
    m = sub.add_parser("make")
    m.add_argument("tokenizer", type=Path)
    m.add_argument("out", type=Path)
    for flag, default in (("hidden", 4096), ("layers", 32), ("heads", 32), ("kv-heads", 8), ("ffn", 14336),
                          ("context", 8192)):
        m.add_argument(f"--{flag}", type=int, default=default)
    m.add_argument("--arch", choices=ARCHS, default="llama")
    m.add_argument("--std", type=float, default=STD)
    m.add_argument("--embed-std", type=float, default=STD)
    ns = p.parse_args()
    if ns.cmd == "dump-tokenizer":
        print(f"{dump_tokenizer(ns.src, ns.out)} tokenizer keys -> {ns.out}")
    else:
        n = make(ns.tokenizer, ns.out, ns.hidden, ns.layers, ns.heads, ns.kv_heads, ns.ffn, ns.context,
                 ns.arch, ns.std, ns.embed_std)
        print(f"{n / 1e9:.2f}B parameters -> {ns.out} ({ns.out.stat().st_size / 2**30:.1f} GiB)")


if __name__ == "__main__":
    main()
