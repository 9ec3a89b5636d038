"""A GGUF file's tokenizer, written as the Hugging Face files mlx-lm loads (`tokenizer.json`,
`tokenizer_config.json`), built with the `tokenizers` library from the file's metadata.

GGUF keeps the tokenizer in its metadata (`tokenizer.ggml.*`): the model family (`gpt2`:
byte-level BPE), every token, the merges, each token's type (3: control), the special ids, the
chat template, and `tokenizer.ggml.pre`, llama.cpp's name for the pre-tokenizer the model was
trained with. Byte-level BPE models are built here, for the pre-tokenizers in `PRE_TOKENIZERS`
(the suite checks them against llama.cpp's own tokenizer on the real model), and for the others
transformers' GGUF converter knows a split regex of (`tekken`, `deepseek-r1-qwen`, `gpt-4o`, ...):
the tokens as the file writes them, so special tokens stay whole and nothing is added. Every other
kind (SentencePiece `llama` tokenizers: Llama 2, Mistral 7B v0.1, Gemma, Phi-3; T5's Unigram) is
built by transformers' GGUF tokenizer converter (`transformers.integrations.gguf`), which knows
each family's normalizer, pre-tokenizer and decoder; WordPiece (BERT's embedding models) in
`gguf_wordpiece.py`. What none knows (a pre-tokenizer no one names) is refused by name.
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


def _pre_tokenizer_steps(pre: str) -> tuple[str, ...]:
    """The steps of llama.cpp's pre-tokenizer `pre`: ours, or the split regex transformers' GGUF
    converter knows for it followed by the byte-level mapping."""
    steps = PRE_TOKENIZERS.get(pre)
    if steps is None and (split := _converter_splits().get(pre)) is not None:
        steps = ("split:" + split, "bytelevel-noregex")
    if steps is None:
        known = sorted({*PRE_TOKENIZERS, *_converter_splits()})
        raise TokenizerError(f"pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not supported "
                             f"(supported: {', '.join(known)})")
    return steps


def _pre_tokenizer(pre: str) -> Any:
    from tokenizers import Regex, pre_tokenizers

    steps = _pre_tokenizer_steps(pre)
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
    if _text(meta, "tokenizer.ggml.model") == "gpt2":  # the tokens as written, special ones whole
        return _build_byte_level(meta, out, context)
    if _text(meta, "tokenizer.ggml.model") == "bert":
        from skulk.node.gguf_wordpiece import build_wordpiece

        return build_wordpiece(meta, out, context)
    return _build_by_transformers(meta, out, context)


def _converter_splits() -> dict[str, str]:
    """The split regexes of the byte-level pre-tokenizers transformers' GGUF converter knows
    (none where it is missing)."""
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS
    except ImportError:
        return {}
    return dict(GGUF_PRE_TOKENIZER_SPLITS)


def _tokenizer_dict(meta: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """transformers' `get_gguf_tokenizer` on metadata already read (its own reader imports torch):
    the architecture, the tokenizer's fields under transformers' names, and its config."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING

    def plain(value: Any) -> Any:
        return value.tolist() if hasattr(value, "tolist") else value

    grouped = {group: {name: plain(meta[f"tokenizer.{key}"]) for key, name in renames.items()
                       if f"tokenizer.{key}" in meta}
               for group, renames in GGUF_TOKENIZER_MAPPING.items()}
    tokenizer, config = grouped["tokenizer"], grouped["tokenizer_config"]
    if tokenizer.get("tokenizer_type") == "llama":
        config.setdefault("add_bos_token", True)  # llama.cpp adds BOS to a SentencePiece vocabulary unless told not to
    elif tokenizer.get("tokenizer_type") == "gemma4":
        config["add_bos_token"] = False  # its chat template writes <bos> itself
    tokens = tokenizer.get("tokens") or []
    for name in ("bos", "eos", "unknown", "padding"):
        i = _int(meta, f"tokenizer.ggml.{name}_token_id")
        config[{"unknown": "unk", "padding": "pad"}.get(name, name) + "_token"] = (
            tokens[i] if i is not None and 0 <= i < len(tokens) else None)
    return str(meta.get("general.architecture", "")), tokenizer, config


def _as_llama_cpp_does(backend: Any, architecture: str, tokenizer_dict: dict[str, Any],
                       tokenizer_config: dict[str, Any]) -> None:
    """Two things llama.cpp does that the converted tokenizer does not. A SentencePiece `llama`
    vocabulary: the space prefix is prepended to the text as it is (`" hi"` -> `"▁▁hi"`, as
    SentencePiece and Llama 2's own tokenizer.json do; the converter's `Metaspace` would not double
    it). Every vocabulary: BOS (and EOS) added where the file says so (`add_bos_token`), as a
    post-processor, so `encode` adds them as llama.cpp's tokenizer does."""
    from tokenizers import normalizers
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_SENTENCEPIECE_BUILDERS

    if tokenizer_dict.get("tokenizer_type") == "llama" and architecture not in GGUF_SENTENCEPIECE_BUILDERS:
        steps: list[Any] = [normalizers.Replace(pattern=" ", content="\u2581")]
        if tokenizer_dict.get("add_prefix_space", True):
            steps.insert(0, normalizers.Prepend(prepend="\u2581"))
        backend.normalizer = normalizers.Sequence(steps)
        backend.pre_tokenizer = None
    _add_ends(backend, str(tokenizer_config.get("bos_token") or ""), str(tokenizer_config.get("eos_token") or ""),
              bool(tokenizer_config.get("add_bos_token")), bool(tokenizer_config.get("add_eos_token")))


def _add_ends(backend: Any, bos: str, eos: str, add_bos: bool, add_eos: bool) -> None:
    """BOS and EOS added to every input where the file says so, as llama.cpp's tokenizer does
    (a post-processor of the tokenizer: `encode` then adds them, for MLX's raw prompts too)."""
    from tokenizers import processors

    add_bos, add_eos = add_bos and bool(bos), add_eos and bool(eos)
    missing = [t for t, on in ((bos, add_bos), (eos, add_eos)) if on and backend.token_to_id(t) is None]
    if missing:
        raise TokenizerError(f"the file's {' and '.join(missing)} (to be added to every input) is not a token of "
                             "the tokenizer built from it")
    if add_bos or add_eos:
        def around(seq: str) -> str:
            return " ".join([*([bos] if add_bos else []), seq, *([eos] if add_eos else [])])

        backend.post_processor = processors.TemplateProcessing(
            single=around("$A"), pair=f"{around('$A')} {around('$B:1')}",
            special_tokens=[(t, backend.token_to_id(t)) for t, on in ((bos, add_bos), (eos, add_eos)) if on])


def _build_by_transformers(meta: dict[str, Any], out: Path, context: int) -> dict[str, int | None]:
    """transformers' converter: the file's tokenizer as the Hugging Face class of its family."""
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer
    except ImportError as exc:
        raise TokenizerError(f"tokenizer model {_text(meta, 'tokenizer.ggml.model')!r} needs transformers' GGUF "
                             f"tokenizer converter, which the installed transformers lacks ({exc})") from None
    architecture, tokenizer_dict, tokenizer_config = _tokenizer_dict(meta)
    if not tokenizer_dict.get("tokens"):
        raise TokenizerError("the file has no tokenizer.ggml.tokens")
    try:
        backend, _ = convert_gguf_tokenizer(architecture, tokenizer_dict)
    except (ValueError, KeyError, TypeError) as exc:
        raise TokenizerError(f"tokenizer model {tokenizer_dict.get('tokenizer_type')!r} (tokenizer.ggml.model) is "
                             f"not supported: {exc}") from None
    _as_llama_cpp_does(backend, architecture, tokenizer_dict, tokenizer_config)
    out.mkdir(parents=True, exist_ok=True)
    backend.save(str(out / "tokenizer.json"))
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **{k: tokenizer_config.get(k) for k in ("bos_token", "eos_token", "pad_token", "unk_token")},
        "add_bos_token": bool(tokenizer_config.get("add_bos_token")),
        "add_eos_token": bool(tokenizer_config.get("add_eos_token")),
        "clean_up_tokenization_spaces": False, "model_max_length": context,
        "chat_template": tokenizer_config.get("chat_template"),
    }
    (out / "tokenizer_config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None},
                                                          indent=2, ensure_ascii=False))
    return {"bos": _int(meta, "tokenizer.ggml.bos_token_id"), "eos": _int(meta, "tokenizer.ggml.eos_token_id")}


def _build_byte_level(meta: dict[str, Any], out: Path, context: int) -> dict[str, int | None]:
    """Byte-level BPE with a known pre-tokenizer, built here from the tokens and merges."""
    from tokenizers import AddedToken, Tokenizer, decoders, models

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
    ids = {name: _int(meta, f"tokenizer.ggml.{name}_token_id") for name in ("bos", "eos", "padding", "unknown")}

    def token(name: str) -> str | None:
        i = ids[name]
        return tokens[i] if i is not None and 0 <= i < len(tokens) else None

    def flag(key: str) -> bool:
        raw = meta.get(key)
        return bool(raw.item() if raw is not None and hasattr(raw, "item") else raw)

    add_bos = flag("tokenizer.ggml.add_bos_token")
    _add_ends(tok, token("bos") or "", token("eos") or "", add_bos, flag("tokenizer.ggml.add_eos_token"))
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
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
