"""A GGUF file's tokenizer, written as the Hugging Face files mlx-lm loads (`tokenizer.json`,
`tokenizer_config.json`), built with the `tokenizers` library from the file's metadata.

GGUF keeps the tokenizer in its metadata (`tokenizer.ggml.*`): the model family (`gpt2`:
byte-level BPE), every token, the merges, each token's type (3: control), the special ids, the
chat template, and `tokenizer.ggml.pre`, llama.cpp's name for the pre-tokenizer the model was
trained with. Byte-level BPE models are built here, for the pre-tokenizers in `PRE_TOKENIZERS`;
anything else (SentencePiece `llama` tokenizers, an unknown `pre`) is refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONTROL = 3
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
    "gpt2": ("bytelevel",),
    "default": ("bytelevel",),
    "smollm": ("digits", "bytelevel"),  # digits one by one, then GPT-2's split
    "starcoder": ("digits", "bytelevel"),
    "llama-bpe": ("split:" + LLAMA3_SPLIT, "bytelevel-noregex"),
    "llama3": ("split:" + LLAMA3_SPLIT, "bytelevel-noregex"),
    "qwen2": ("split:" + QWEN2_SPLIT, "bytelevel-noregex"),
}
"""llama.cpp's `tokenizer.ggml.pre` names and the Hugging Face pre-tokenizer steps they stand for."""


class TokenizerError(ValueError):
    """The file's tokenizer cannot be built (the message names what)."""


def _pre_tokenizer(pre: str) -> Any:
    from tokenizers import Regex, pre_tokenizers

    steps = PRE_TOKENIZERS.get(pre)
    if steps is None:
        raise TokenizerError(f"pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not supported "
                             f"(supported: {', '.join(sorted(PRE_TOKENIZERS))})")
    built: list[pre_tokenizers.PreTokenizer] = []
    for step in steps:
        if step == "digits":
            built.append(pre_tokenizers.Digits(individual_digits=True))
        elif step == "bytelevel":
            built.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
        elif step == "bytelevel-noregex":
            built.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
        else:
            built.append(pre_tokenizers.Split(Regex(step[len("split:"):]), behavior="isolated"))
    return pre_tokenizers.Sequence(built)


def _text(meta: dict[str, Any], key: str) -> str | None:
    value = meta.get(key)
    return value if isinstance(value, str) else None


def _int(meta: dict[str, Any], key: str) -> int | None:
    value = meta.get(key)
    if value is None:
        return None
    try:
        return int(value.item()) if hasattr(value, "item") else int(value)
    except (TypeError, ValueError):
        return None


def build(meta: dict[str, Any], out: Path, context: int) -> dict[str, int | None]:
    """Write `tokenizer.json` and `tokenizer_config.json` into `out`; the bos/eos ids."""
    from tokenizers import AddedToken, Tokenizer, decoders, models

    family = _text(meta, "tokenizer.ggml.model")
    if family != "gpt2":
        raise TokenizerError(f"tokenizer model {family!r} (tokenizer.ggml.model) is not supported: "
                             "only byte-level BPE ('gpt2') tokenizers are")
    tokens = meta.get("tokenizer.ggml.tokens")
    merges = meta.get("tokenizer.ggml.merges")
    if not isinstance(tokens, list) or not tokens or not isinstance(merges, list):
        raise TokenizerError("the file has no tokenizer.ggml.tokens / tokenizer.ggml.merges")
    raw_types = meta.get("tokenizer.ggml.token_type")
    types = raw_types.tolist() if raw_types is not None and hasattr(raw_types, "tolist") else list(raw_types or [])
    vocab = {token: i for i, token in enumerate(tokens)}
    pairs: list[tuple[str, str]] = []
    for m in merges:
        if isinstance(m, str) and " " in m:
            left, right = m.split(" ", 1)
            pairs.append((left, right))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = _pre_tokenizer(_text(meta, "tokenizer.ggml.pre") or "default")
    tok.decoder = decoders.ByteLevel()
    control = [tokens[i] for i, t in enumerate(types) if t == CONTROL and i < len(tokens)]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))

    ids = {name: _int(meta, f"tokenizer.ggml.{name}_token_id") for name in ("bos", "eos", "padding", "unknown")}

    def token(name: str) -> str | None:
        i = ids[name]
        return tokens[i] if i is not None and 0 <= i < len(tokens) else None

    raw_bos = meta.get("tokenizer.ggml.add_bos_token")
    add_bos = bool(raw_bos.item() if raw_bos is not None and hasattr(raw_bos, "item") else raw_bos)
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token("bos"), "eos_token": token("eos"), "pad_token": token("padding"),
        "unk_token": token("unknown"), "add_bos_token": add_bos,
        "clean_up_tokenization_spaces": False, "model_max_length": context,
    }
    if (template := _text(meta, "tokenizer.chat_template")) is not None:
        config["chat_template"] = template
    (out / "tokenizer_config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None},
                                                          indent=2, ensure_ascii=False))
    return {"bos": ids["bos"], "eos": ids["eos"]}
