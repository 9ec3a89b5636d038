"""A GGUF file's WordPiece vocabulary (`tokenizer.ggml.model = bert`: BERT's embedding models,
bge, MiniLM, ...) as the Hugging Face `tokenizer.json` that tokenizes text as llama.cpp does.

llama.cpp's converter writes BERT's vocabulary in "phantom space" form: a word-initial piece
`foo` as `▁foo`, a continuation `##oo` as `oo`, control tokens (`[CLS]`, `[SEP]`, ...) as they
are. Undone here, it is BERT's own vocabulary again, and `tokenizers`' WordPiece with BERT's
normalizer and pre-tokenizer splits text the way llama.cpp's WPM tokenizer does
(`llm_tokenizer_wpm_session`): drop control characters, lower-case and strip accents when told
(`tokenizer.ggml.normalizer.*`, both on by default as in llama.cpp; `normalizer` says how exactly),
every punctuation mark and CJK character a word of its own, each word the longest pieces from its
start or unknown as a whole, and `[CLS] ... [SEP]` around every input. The special ids a file does
not name are llama.cpp's defaults for BERT (101 `[CLS]`, 102 `[SEP]`, 100 `[UNK]`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from skulk.node.gguf_tokenizer import CONTROL, TokenizerError, _int

PHANTOM = "\u2581"
DEFAULT_IDS = {"bos": 101, "sep": 102, "unk": 100, "pad": 0, "mask": 103}
"""llama.cpp's special ids for a `bert` vocabulary whose file does not name them (bert-base's)."""
HANGUL, PER_LEAD, LEAD_JAMO = 0xAC00, 588, 0x1100  # 19 leading jamo x 588 syllables each, from U+AC00
KEYS = {"bos": "bos_token_id", "sep": "seperator_token_id", "unk": "unknown_token_id", "pad": "padding_token_id",
        "mask": "mask_token_id"}  # `seperator`: llama.cpp's own spelling of the key


def bert_vocab(tokens: list[str], types: list[int]) -> dict[str, int]:
    """The WordPiece vocabulary the converter's phantom-space tokens came from."""
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if i < len(types) and types[i] == CONTROL:
            piece = token
        elif token.startswith(PHANTOM):
            piece = token[len(PHANTOM):]
        else:
            piece = "##" + token
        vocab[piece] = i  # the last id wins, as in llama.cpp's (and BERT's own) vocabulary
    return vocab


def special_ids(meta: dict[str, Any], size: int) -> dict[str, int | None]:
    """The file's special ids, llama.cpp's defaults where it names none or one out of range
    (None: the default is out of range too)."""
    ids: dict[str, int | None] = {}
    for name, key in KEYS.items():
        i = _int(meta, f"tokenizer.ggml.{key}")
        i = DEFAULT_IDS[name] if i is None or not 0 <= i < size else i
        ids[name] = i if 0 <= i < size else None
    return ids


def normalizer(lowercase: bool, strip_accents: bool) -> Any:
    """llama.cpp's WPM preprocessing as `tokenizers` normalizers: vertical tab, form feed and
    U+0085 are whitespace to it (BERT's `clean_text` would drop them); with accents stripped, its
    one-codepoint NFD (a Hangul syllable becomes its leading jamo alone) and every mark dropped
    (spacing and enclosing ones too, not only BERT's nonspacing ones)."""
    from tokenizers import Regex, normalizers

    steps: list[Any] = [normalizers.Replace(Regex("[\x0b\x0c\x85]"), " "),
                        normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False,
                                                   lowercase=lowercase)]
    if strip_accents:
        for lead in range(19):
            first = HANGUL + lead * PER_LEAD
            syllables = Regex(f"[{chr(first)}-{chr(first + PER_LEAD - 1)}]")
            steps.append(normalizers.Replace(syllables, chr(LEAD_JAMO + lead)))
        steps += [normalizers.NFD(), normalizers.StripAccents()]
    return normalizers.Sequence(steps)


def _flag(meta: dict[str, Any], key: str, default: bool) -> bool:
    raw = meta.get(key)
    if raw is None:
        return default
    return bool(raw.item() if hasattr(raw, "item") else raw)


def build_wordpiece(meta: dict[str, Any], out: Path, context: int) -> dict[str, int | None]:
    """Write `tokenizer.json` and `tokenizer_config.json` for a `bert` vocabulary; the bos/eos ids
    (BERT has no end of text: its `[SEP]` closes an input, it does not end an answer)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise TokenizerError("the file has no tokenizer.ggml.tokens")
    raw_types = meta.get("tokenizer.ggml.token_type")
    types = raw_types.tolist() if raw_types is not None and hasattr(raw_types, "tolist") else list(raw_types or [])
    ids = special_ids(meta, len(tokens))
    missing = [name for name in ("bos", "sep", "unk") if ids[name] is None]
    if missing:
        raise TokenizerError(f"the WordPiece vocabulary of {len(tokens)} tokens has no {' / '.join(missing)} "
                             "token (tokenizer.ggml.*_token_id)")
    vocab = bert_vocab([str(t) for t in tokens], types)

    def piece(name: str) -> str | None:
        i = ids[name]
        return None if i is None else next((p for p, j in vocab.items() if j == i), None)

    cls, sep, unk = piece("bos"), piece("sep"), piece("unk")
    if cls is None or sep is None or unk is None:
        raise TokenizerError("the WordPiece vocabulary's [CLS] / [SEP] / [UNK] ids name no token of their own")
    lowercase = _flag(meta, "tokenizer.ggml.normalizer.lowercase", True)
    strip_accents = _flag(meta, "tokenizer.ggml.normalizer.strip_accents", lowercase)
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token=unk, continuing_subword_prefix="##",
                                     max_input_chars_per_word=1 << 30))  # llama.cpp has no limit
    tok.normalizer = normalizer(lowercase, strip_accents)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    control = [str(tokens[i]) for i, t in enumerate(types) if t == CONTROL and i < len(tokens)]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast", "cls_token": cls, "sep_token": sep, "unk_token": unk,
        "pad_token": piece("pad"), "mask_token": piece("mask"), "do_lower_case": lowercase,
        "clean_up_tokenization_spaces": True, "model_max_length": context,
    }
    (out / "tokenizer_config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None},
                                                          indent=2, ensure_ascii=False))
    return {"bos": ids["bos"], "eos": None}
