"""GGUF files the tests make from the real model's: a copy with metadata added, as llama.cpp's own
`gguf_new_metadata` script writes one (the tensors unchanged)."""

from __future__ import annotations

from pathlib import Path

MEAN_POOLING = 1  # llama.cpp's LLAMA_POOLING_TYPE_MEAN


def with_pooling(src: Path, dest: Path, pooling: int = MEAN_POOLING) -> Path:
    """`src` as an embedding GGUF: `<arch>.pooling_type` set, so llama.cpp pools its last hidden
    states into one vector per input (how embedding GGUFs, e.g. Qwen3-Embedding's, say so)."""
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata, get_field_data

    reader = gguf.GGUFReader(src, "r")
    arch = get_field_data(reader, gguf.Keys.General.ARCHITECTURE)
    writer = gguf.GGUFWriter(dest, arch=arch, endianess=reader.endianess)
    if (alignment := get_field_data(reader, gguf.Keys.General.ALIGNMENT)) is not None:
        writer.data_alignment = alignment
    copy_with_new_metadata(reader, writer, {f"{arch}.pooling_type": MetadataDetails(gguf.GGUFValueType.UINT32,
                                                                                     pooling)}, [])
    return dest


LLAMA2_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
                   "{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}")
"""A chat template of Llama 2's shape (instructions in [INST] ... [/INST], bos written by the template)."""

SPM_TYPES = {"normal": 1, "unknown": 2, "control": 3, "user_defined": 4, "unused": 5, "byte": 6}


def sentencepiece_tokenizer(corpus: list[Path], dest: Path, vocab: int = 1000) -> Path:
    """A SentencePiece BPE tokenizer of Llama 2's kind (byte fallback, `<unk>` `<s>` `</s>` at 0-2),
    trained on `corpus` by the sentencepiece library and written as the `tokenizer.*` keys
    llama.cpp's converter gives such a model (`tokenizer.ggml.model` "llama": pieces, scores, token
    types), in `tools.random_gguf`'s dump format."""
    import io

    import gguf
    import sentencepiece as spm

    lines = [ln for f in corpus for ln in f.read_text().splitlines() if ln.strip()]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, model_type="bpe",
                                   vocab_size=vocab, byte_fallback=True, character_coverage=1.0,
                                   unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1,
                                   minloglevel=2, add_dummy_prefix=True, split_digits=True)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    kinds = [("unknown" if sp.is_unknown(i) else "control" if sp.is_control(i) else "byte" if sp.is_byte(i)
              else "unused" if sp.is_unused(i) else "normal") for i in range(sp.get_piece_size())]
    T = gguf.GGUFValueType
    fields = [
        {"name": "tokenizer.ggml.model", "types": [T.STRING], "value": "llama"},
        {"name": "tokenizer.ggml.pre", "types": [T.STRING], "value": "default"},
        {"name": "tokenizer.ggml.tokens", "types": [T.ARRAY, T.STRING],
         "value": [sp.id_to_piece(i) for i in range(sp.get_piece_size())]},
        {"name": "tokenizer.ggml.scores", "types": [T.ARRAY, T.FLOAT32],
         "value": [sp.get_score(i) for i in range(sp.get_piece_size())]},
        {"name": "tokenizer.ggml.token_type", "types": [T.ARRAY, T.INT32], "value": [SPM_TYPES[k] for k in kinds]},
        {"name": "tokenizer.ggml.bos_token_id", "types": [T.UINT32], "value": 1},
        {"name": "tokenizer.ggml.eos_token_id", "types": [T.UINT32], "value": 2},
        {"name": "tokenizer.ggml.unknown_token_id", "types": [T.UINT32], "value": 0},
        {"name": "tokenizer.ggml.add_bos_token", "types": [T.BOOL], "value": True},
        {"name": "tokenizer.ggml.add_eos_token", "types": [T.BOOL], "value": False},
        {"name": "tokenizer.ggml.add_space_prefix", "types": [T.BOOL], "value": True},
        {"name": "tokenizer.chat_template", "types": [T.STRING], "value": LLAMA2_TEMPLATE},
    ]
    import json

    dest.write_text(json.dumps([{**f, "types": [int(t) for t in f["types"]]} for f in fields]))
    return dest


BERT_SPECIALS = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}
"""bert-base's special ids: those llama.cpp assumes of a `bert` vocabulary whose file does not name them."""


def wordpiece_tokenizer(corpus: list[Path], dest: Path, vocab: int = 2000) -> Path:
    """A WordPiece tokenizer of BERT's kind (lower-cased, accents stripped, `[CLS] ... [SEP]`),
    trained on `corpus` by the tokenizers library, its special tokens at bert-base's ids, written
    as the `tokenizer.*` keys llama.cpp's converter gives a BERT model (phantom-space pieces, token
    types, the special ids as `SpecialVocab` names them: no bos key, so llama.cpp takes its default
    [CLS] id), in `tools.random_gguf`'s dump format."""
    import json

    import gguf
    from tokenizers import BertWordPieceTokenizer

    lines = [ln for f in corpus for ln in f.read_text().splitlines() if ln.strip()]
    trainer = BertWordPieceTokenizer(lowercase=True, strip_accents=True)
    trainer.train_from_iterator(lines, vocab_size=vocab, special_tokens=list(BERT_SPECIALS))
    trained = sorted(trainer.get_vocab().items(), key=lambda kv: kv[1])
    size = max(len(trained), max(BERT_SPECIALS.values()) + 1)
    pieces: list[str | None] = [None] * size
    for piece, i in BERT_SPECIALS.items():
        pieces[i] = piece
    rest = iter(p for p, _ in trained if p not in BERT_SPECIALS)
    pieces = [p if p is not None else next(rest, f"[unused{i}]") for i, p in enumerate(pieces)]
    pieces += list(rest)
    control = gguf.TokenType.CONTROL
    types = [int(control if p in BERT_SPECIALS else gguf.TokenType.NORMAL) for p in pieces]
    tokens = [p if p in BERT_SPECIALS else p[2:] if p.startswith("##") else "\u2581" + p for p in pieces]
    T = gguf.GGUFValueType
    fields = [
        {"name": "tokenizer.ggml.model", "types": [T.STRING], "value": "bert"},
        {"name": "tokenizer.ggml.pre", "types": [T.STRING], "value": "default"},
        {"name": "tokenizer.ggml.tokens", "types": [T.ARRAY, T.STRING], "value": tokens},
        {"name": "tokenizer.ggml.token_type", "types": [T.ARRAY, T.INT32], "value": types},
        *({"name": f"tokenizer.ggml.{key}", "types": [T.UINT32], "value": BERT_SPECIALS[piece]}
          for key, piece in (("unknown_token_id", "[UNK]"), ("seperator_token_id", "[SEP]"),
                             ("padding_token_id", "[PAD]"), ("cls_token_id", "[CLS]"), ("mask_token_id", "[MASK]"))),
    ]
    dest.write_text(json.dumps([{**f, "types": [int(t) for t in f["types"]]} for f in fields]))
    return dest
