"""`skulk model demo`: build `skulk/demo-tiny` locally and deterministically.

A small qwen2 (supports tensor and pipeline sharding in mlx-lm) with seeded random weights
saved by mlx-lm (`model.safetensors` + `model.safetensors.index.json`), a byte-level BPE
tokenizer trained offline on a corpus generated here from the Zen of Python with a seeded
RNG (no files from outside, so the same seed gives the same bytes on every machine), and a
ChatML chat template. Greedy output of random weights is gibberish; it is for plumbing,
equality checks and benchmarks, not for reading.

`--kind embedding` builds `skulk/demo-embed` the same way: a smaller qwen2 with the same
tokenizer, plus sentence-transformers' files (`modules.json`, mean pooling, normalisation),
which make its card an embedding model's (`tasks: TextEmbedding`).
"""

from __future__ import annotations

import codecs
import hashlib
import json
import random
import shutil
import tempfile
from pathlib import Path
from typing import TypedDict

MODEL_ID = "skulk/demo-tiny"
DIR_NAME = "skulk--demo-tiny"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


class Arch(TypedDict):
    """A demo model's shape: the Qwen2 config keys it sets."""

    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool


ARCH: Arch = {"hidden_size": 256, "num_hidden_layers": 4, "intermediate_size": 768,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048,
              "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": True}
SIZES: dict[str, Arch] = {
    "tiny": ARCH,
    # ~101M parameters (404 MB fp32): the benchmarks' "~100M model", same tokenizer.
    "100m": {**ARCH, "hidden_size": 768, "num_hidden_layers": 16, "intermediate_size": 2048,
             "num_attention_heads": 12, "num_key_value_heads": 4,
             "max_position_embeddings": 4096},
    # Llama-3-8B's shape (7.0B parameters, 14 GB in bf16) for GPU benchmarks: built on the
    # device, never in the suite.
    "8b": {**ARCH, "hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 14336,
           "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 8192,
           "rope_theta": 500000.0, "tie_word_embeddings": False}}
DTYPES = {"8b": "bfloat16"}
"""Stored dtype per size (float32 where not named)."""
VOCAB_TARGET = 1024
EMBED_ID = "skulk/demo-embed"
EMBED_ARCH: Arch = {**ARCH, "hidden_size": 128, "num_hidden_layers": 2, "intermediate_size": 256,
                    "num_attention_heads": 4, "num_key_value_heads": 2}
KINDS = ("text", "embedding", "tools")


def sentence_transformers_files(dim: int) -> dict[str, object]:
    """What marks a directory as an embedding model (sentence-transformers' layout): the
    transformer, mean pooling over tokens, L2 normalisation."""
    return {
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
        "config_sentence_transformers.json": {"similarity_fn_name": "cosine", "prompts": {},
                                              "default_prompt_name": None},
        "1_Pooling/config.json": {"word_embedding_dimension": dim, "pooling_mode_mean_tokens": True,
                                  "pooling_mode_cls_token": False, "pooling_mode_max_tokens": False,
                                  "pooling_mode_lasttoken": False}}


def _zen_rot13() -> str:
    """`this.s` read from the module's source (importing `this` would print it)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("this")
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "s":
            return ast.literal_eval(node.value)
    raise RuntimeError("the Zen of Python is missing from this.py")


def corpus(seed: int, lines: int = 4000) -> list[str]:
    """Deterministic training text: the Zen of Python, then seeded sentences of its words."""
    zen = codecs.decode(_zen_rot13(), "rot13")
    words = zen.replace("\n", " ").split()
    rng = random.Random(seed)
    out = zen.splitlines()
    for _ in range(lines):
        out.append(" ".join(rng.choice(words) for _ in range(rng.randint(4, 16))))
    out += ["def f(x):\n    return x + 1", "print('hello, world')", "0123456789 .,;:!?()[]{}"]
    return out


def build_tokenizer(out: Path, seed: int, max_length: int = ARCH["max_position_embeddings"]) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_TARGET, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "chat_template": CHAT_TEMPLATE, "model_max_length": max_length,
        "add_bos_token": False, "clean_up_tokenization_spaces": False}, indent=2, sort_keys=True))
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, indent=2, sort_keys=True))
    return tok.get_vocab_size()


def build(models_dir: Path, seed: int = 0, force: bool = False, size: str = "tiny",
          kind: str = "text") -> Path:
    """Write the model into `<models_dir>/skulk--demo-<size>` (`skulk--demo-embed` for the
    embedding kind), atomically, and return its path."""
    embedding = kind == "embedding"
    arch = EMBED_ARCH if embedding else SIZES[size]
    target = models_dir / ("skulk--demo-embed" if embedding else f"skulk--demo-{size}")
    if target.is_dir() and (target / "config.json").is_file() and not force:
        return target
    import mlx.core as mx
    from mlx_lm.models import qwen2
    from mlx_lm.utils import save_model

    models_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".demo-", dir=models_dir))
    try:
        vocab = build_tokenizer(work, seed, arch["max_position_embeddings"])
        tokenizer = json.loads((work / "tokenizer.json").read_text())["added_tokens"]
        eos = next(t["id"] for t in tokenizer if t["content"] == "<|im_end|>")
        config = {"model_type": "qwen2", "architectures": ["Qwen2Model" if embedding else "Qwen2ForCausalLM"],
                  "vocab_size": vocab, "torch_dtype": DTYPES.get(size, "float32"), "eos_token_id": eos, **arch}
        mx.random.seed(seed)
        model = qwen2.Model(qwen2.ModelArgs.from_dict(config))
        model.set_dtype(getattr(mx, DTYPES.get(size, "float32")))
        mx.eval(model.parameters())
        save_model(work, model)
        (work / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
        for name, content in (sentence_transformers_files(arch["hidden_size"]) if embedding else {}).items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_text(json.dumps(content, indent=2, sort_keys=True))
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return target


def digest(model_dir: Path) -> str:
    """sha256 over every file's name and bytes: the same seed must give the same digest."""
    h = hashlib.sha256()
    for f in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        h.update(f.relative_to(model_dir).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()
