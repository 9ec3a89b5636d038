"""GGUF import without mlx: llama.cpp's tensor names onto mlx-lm's, the quantization config per
layer, which source is a GGUF file, and the tokenizer built from the metadata (the conversion
itself runs on the real model in tests/integration/test_real_model.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from tokenizers import Tokenizer

from skulk.node import gguf_tokenizer
from skulk.node.gguf_import import mlx_name, quantization
from skulk.node.model_import import FetchError, default_gguf_id, gguf_file


def test_llama_cpp_names_map_onto_mlx_lms():
    assert mlx_name("blk.7.attn_q.weight") == "model.layers.7.self_attn.q_proj.weight"
    assert mlx_name("blk.7.attn_q.scales") == "model.layers.7.self_attn.q_proj.scales"
    assert mlx_name("blk.0.attn_k.bias") == "model.layers.0.self_attn.k_proj.bias"  # qwen2's linear bias
    assert mlx_name("blk.0.ffn_down.biases") == "model.layers.0.mlp.down_proj.biases"  # the quantization's
    assert mlx_name("blk.12.attn_norm.weight") == "model.layers.12.input_layernorm.weight"
    assert mlx_name("blk.12.ffn_norm.weight") == "model.layers.12.post_attention_layernorm.weight"
    assert mlx_name("token_embd.weight") == "model.embed_tokens.weight"
    assert mlx_name("output_norm.weight") == "model.norm.weight"
    assert mlx_name("output.weight") == "lm_head.weight"
    for unknown in ("rope_freqs.weight", "blk.0.ffn_gate_exps.weight", "blk.x.attn_q.weight", "mm.0.weight"):
        assert mlx_name(unknown) is None, unknown


def shaped(*shape: int) -> SimpleNamespace:
    return SimpleNamespace(shape=shape)


def test_the_quantization_is_the_common_bits_with_each_layer_that_differs():
    weights = {  # in = 576: 4 bits -> 72 uint32 per row, 8 bits -> 144; 18 groups of 32
        "model.layers.0.self_attn.q_proj.weight": shaped(576, 72),
        "model.layers.0.self_attn.q_proj.scales": shaped(576, 18),
        "model.layers.0.mlp.up_proj.weight": shaped(1536, 72), "model.layers.0.mlp.up_proj.scales": shaped(1536, 18),
        "model.embed_tokens.weight": shaped(49152, 144), "model.embed_tokens.scales": shaped(49152, 18),
        "model.norm.weight": shaped(576),
    }
    assert quantization(weights) == {"group_size": 32, "bits": 4,
                                     "model.embed_tokens": {"group_size": 32, "bits": 8}}
    assert quantization({"model.norm.weight": shaped(576)}) is None  # an F16/F32 file


def test_a_gguf_source_is_the_file_or_the_one_file_in_a_directory(tmp_path: Path):
    model = tmp_path / "m.Q4_0.gguf"
    model.write_bytes(b"GGUF")
    assert gguf_file(model) == model and default_gguf_id(model) == "local/m.Q4_0"
    assert gguf_file(tmp_path) == model
    (tmp_path / "other.gguf").write_bytes(b"GGUF")
    with pytest.raises(FetchError, match="holds 2 .gguf files"):
        gguf_file(tmp_path)
    mlx_dir = tmp_path / "mlx"
    mlx_dir.mkdir()
    (mlx_dir / "config.json").write_text("{}")
    (mlx_dir / "stray.gguf").write_bytes(b"GGUF")
    assert gguf_file(mlx_dir) is None  # a model directory is copied, not imported
    assert gguf_file(tmp_path / "missing.gguf") is None


def tiny_meta(**extra: object) -> dict[str, object]:
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "ab", "Ġ", "Ġa", "1", "2"]
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.merges": ["a b", "Ġ a"], "tokenizer.ggml.token_type": [3, 3, 3, 1, 1, 1, 1, 1, 1, 1],
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.add_bos_token": False,
            "tokenizer.chat_template": "{{ messages[0]['content'] }}", **extra}


def test_the_tokenizer_is_built_from_the_metadata(tmp_path: Path):
    ids = gguf_tokenizer.build(tiny_meta(), tmp_path, 8192)
    assert ids == {"bos": 1, "eos": 2}
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    enc = tok.encode("ab a12<|im_end|>")
    assert enc.ids == [5, 7, 8, 9, 2]  # merges applied, digits one by one, a control token whole
    assert tok.decode(enc.ids, skip_special_tokens=False) == "ab a12<|im_end|>"
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["bos_token"] == "<|im_start|>" and config["eos_token"] == "<|im_end|>"
    assert config["add_bos_token"] is False and config["chat_template"] == "{{ messages[0]['content'] }}"
    assert config["model_max_length"] == 8192


@pytest.mark.parametrize("extra,needle", [
    ({"tokenizer.ggml.model": "rwkv"}, "tokenizer model 'rwkv'"),  # a vocabulary no builder knows
    ({"tokenizer.ggml.pre": "deepseek-coder"}, "pre-tokenizer 'deepseek-coder'"),
    ({"tokenizer.ggml.tokens": []}, "no tokenizer.ggml.tokens"),
])
def test_tokenizers_it_cannot_build_are_refused_by_name(tmp_path: Path, extra, needle):
    with pytest.raises(gguf_tokenizer.TokenizerError, match=needle):
        gguf_tokenizer.build(tiny_meta(**extra), tmp_path, 8192)


def bert_meta(**extra: object) -> dict[str, object]:
    """A WordPiece vocabulary as llama.cpp's converter writes BERT's: phantom-space pieces."""
    tokens = ["[PAD]", "\u2581hello", "\u2581world", "\u2581un", "able", "\u2581,", "[UNK]", "[CLS]", "[SEP]",
              "\u2581a", "b", "\u2581cafe", "\u2581Hello"]
    return {"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": [3, 1, 1, 1, 1, 1, 3, 3, 3, 1, 1, 1, 1],
            "tokenizer.ggml.unknown_token_id": 6, "tokenizer.ggml.bos_token_id": 7,
            "tokenizer.ggml.seperator_token_id": 8, **extra}


def test_a_wordpiece_vocabulary_tokenizes_as_llama_cpps_wpm(tmp_path: Path):
    from skulk.node.gguf_wordpiece import bert_vocab, special_ids

    assert bert_vocab(["[CLS]", "\u2581ab", "cd"], [3, 1, 1]) == {"[CLS]": 0, "ab": 1, "##cd": 2}
    ids = gguf_tokenizer.build(bert_meta(), tmp_path, 512)
    assert ids == {"bos": 7, "eos": None}  # [SEP] closes an input; it does not end an answer
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    # lower-cased, accents stripped, punctuation a word of its own, a word no pieces make -> [UNK]
    assert tok.encode("Hello, World unable Café xyz").ids == [7, 1, 5, 2, 3, 4, 11, 6, 8]
    assert tok.encode("[SEP]ab").ids == [7, 8, 9, 10, 8]  # a special token in the text is that token
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert (config["cls_token"], config["sep_token"], config["unk_token"]) == ("[CLS]", "[SEP]", "[UNK]")
    cased = tmp_path / "cased"
    gguf_tokenizer.build(bert_meta(**{"tokenizer.ggml.normalizer.lowercase": False}), cased, 512)
    assert Tokenizer.from_file(str(cased / "tokenizer.json")).encode("Hello hello").ids == [7, 12, 1, 8]
    # as llama.cpp's WPM: a form feed is whitespace, a spacing mark is stripped, a Hangul syllable is
    # its leading jamo alone (its one-codepoint NFD)
    assert [tok.normalizer.normalize_str(t) for t in ("a\x0cb", "ab\u093ec", "\uac01")] == ["a b", "abc", "\u1100"]
    # a file that names no special ids, or one out of range, gets llama.cpp's defaults for BERT
    defaults = {"bos": 101, "sep": 102, "unk": 100, "pad": 0, "mask": 103}
    assert special_ids({}, 30522) == special_ids({"tokenizer.ggml.bos_token_id": 40000}, 30522) == defaults
    assert bert_vocab(["\u2581a", "\u2581a"], [1, 1]) == {"a": 1}  # the last id wins, as in llama.cpp
    with pytest.raises(gguf_tokenizer.TokenizerError, match="has no bos / sep / unk token"):
        gguf_tokenizer.build({"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["\u2581a"]}, tmp_path, 512)


def test_a_directory_with_a_gguf_and_no_mlx_weights_is_for_llama_cpp_alone(tmp_path: Path):
    from skulk.node.model_cards import card_from_dir
    from skulk.wire.models import ModelDirError

    d = tmp_path / "local--k"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                                               "torch_dtype": "q4_k"}))
    with pytest.raises(ModelDirError, match="no \\*.safetensors weights \\(and no model.gguf\\)"):
        card_from_dir(d)
    (d / "model.gguf").write_bytes(b"GGUF" + bytes(1000))
    card = card_from_dir(d)
    assert card.engines == ("llama_cpp",) and card.quantization == "q4_k"
    assert card.storage_size_bytes == card.gguf_bytes == 1004


def test_mlx_weights_only_where_mlx_keeps_every_layer_as_it_is():
    from skulk.node.gguf_import import Header, file_type, not_for_mlx

    def types(*pairs: str) -> Header:  # "blk.0.attn_q=Q4_0" -> {"blk.0.attn_q.weight": "Q4_0"}
        return Header({}, {f"{p.split('=')[0]}.weight": p.split("=")[1] for p in pairs})

    # a Q4_0 file whose embedding and output llama-quantize kept in Q6_K: mlx widens those two
    assert not_for_mlx(types("token_embd=Q6_K", "output=Q6_K", "blk.0.attn_q=Q4_0", "blk.0.attn_norm=F32")) == []
    assert not_for_mlx(types("blk.0.attn_q=Q4_K", "blk.0.attn_k=Q4_K", "blk.0.ffn_down=Q6_K")) == ["Q4_K", "Q6_K"]
    assert not_for_mlx(types("blk.0.attn_q=BF16")) == ["BF16"]  # mlx would narrow it to float16
    assert not_for_mlx(types("blk.0.attn_q=Q5_0", "blk.0.attn_k=Q8_0")) == ["Q5_0"]
    assert file_type({"general.file_type": 15}) == "q4_k_m" and file_type({}) == ""


def test_an_embedding_gguf_is_marked_with_its_pooling_and_a_reranker_is_refused(tmp_path: Path):
    from skulk.node.gguf_import import GGUFError, _pooling, write_embedding_files
    from skulk.node.model_cards import is_embedding_dir
    from skulk.services.runner.embed_engine import Pooling, pooling_of

    f = tmp_path / "x.gguf"
    assert _pooling(f, {"general.architecture": "qwen2"}) is None  # a text model
    assert _pooling(f, {"general.architecture": "qwen2", "qwen2.pooling_type": 0}) is None  # none: text too
    with pytest.raises(GGUFError, match="x.gguf: a reranker"):
        _pooling(f, {"general.architecture": "bert", "bert.pooling_type": 4})
    for kind, expected in ((1, Pooling.MEAN), (2, Pooling.CLS), (3, Pooling.LAST)):
        out = tmp_path / f"local--e{kind}"
        out.mkdir()
        pooling = _pooling(f, {"general.architecture": "llama", "llama.pooling_type": kind})
        assert pooling is not None
        write_embedding_files(out, pooling)
        assert is_embedding_dir(out) and pooling_of(out) is expected


def test_an_embedding_gguf_runs_on_either_engine_and_a_gguf_only_one_on_llama_cpp(tmp_path: Path):
    from skulk.node.gguf_import import write_embedding_files
    from skulk.node.model_cards import card_from_dir

    d = tmp_path / "local--embed"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64,
                                               "gguf_quantization": "q4_k_m"}))
    (d / "model.gguf").write_bytes(b"GGUF" + bytes(100))
    write_embedding_files(d, "mean_tokens")
    card = card_from_dir(d)
    assert card.is_embedding and card.engines == ("llama_cpp",)
    (d / "model.safetensors").write_bytes(bytes(8))
    assert card_from_dir(d).engines == ("mlx", "llama_cpp")


def test_an_architecture_without_an_mlx_layout_gets_a_config_for_llama_cpp_alone():
    from skulk.node.gguf_import import GGUFError, Header, _config

    meta = {"general.architecture": "granite", "granite.attention.head_count": [4, 4, 8],  # per layer
            "granite.embedding_length": 64, "granite.block_count": 3, "granite.context_length": 2048,
            "tokenizer.ggml.tokens": ["a", "b"]}
    header = Header(meta, {"token_embd.weight": "F16", "blk.0.attn_q.weight": "F16"})
    config = _config(Path("g.gguf"), header, for_mlx=False)
    assert config["model_type"] == "granite" and config["num_attention_heads"] == 8
    assert config["max_position_embeddings"] == 2048 and config["vocab_size"] == 2
    with pytest.raises(GGUFError, match="'granite' has no MLX layout here"):
        _config(Path("g.gguf"), header, for_mlx=True)
    with pytest.raises(GGUFError, match="no general.architecture"):
        _config(Path("g.gguf"), Header({}, header.tensors), for_mlx=False)


def test_qwen3s_query_and_key_norms_have_their_mlx_names():
    from skulk.node.gguf_import import Header, _config

    assert mlx_name("blk.3.attn_q_norm.weight") == "model.layers.3.self_attn.q_norm.weight"
    assert mlx_name("blk.3.attn_k_norm.weight") == "model.layers.3.self_attn.k_norm.weight"
    meta = {"general.architecture": "qwen3", "qwen3.attention.head_count": 4, "qwen3.embedding_length": 64,
            "qwen3.block_count": 2, "qwen3.attention.key_length": 16}
    config = _config(Path("q.gguf"), Header(meta, {"token_embd.weight": "F16"}), for_mlx=True)
    assert (config["model_type"], config["head_dim"], config["rope_traditional"]) == ("qwen3", 16, False)


def spm_meta(add_space_prefix: bool = True) -> dict[str, object]:
    """A SentencePiece vocabulary as llama.cpp writes one (`tokenizer.ggml.model` "llama": pieces
    and scores, no merges; the BPE merges follow from the scores)."""
    tokens = ["<unk>", "<s>", "</s>", "\u2581", "h", "i", "\u2581h", "hi", "\u2581hi", "<0x0A>"]
    return {"general.architecture": "llama", "tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default",
            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": [0, 0, 0, -1, -2, -3, -4, -5, -6, 0],
            "tokenizer.ggml.token_type": [2, 3, 3, 1, 1, 1, 1, 1, 1, 6], "tokenizer.ggml.bos_token_id": 1,
            "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
            "tokenizer.ggml.add_space_prefix": add_space_prefix, "tokenizer.chat_template": "{{ bos_token }}x"}


def test_a_sentencepiece_vocabulary_is_built_by_transformers_and_tokenizes_as_llama_cpp(tmp_path: Path):
    """Llama 2's kind: BOS added (llama.cpp's default for SentencePiece), the space prefix
    prepended to the text as it is, so a leading space doubles (`" hi"` -> `▁ ▁hi`), and the
    decoder takes the prefix off again."""
    assert gguf_tokenizer.build(spm_meta(), tmp_path, 4096) == {"bos": 1, "eos": 2}
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tok.encode("hi").ids == [1, 8]
    assert tok.encode(" hi").ids == [1, 3, 8]
    assert tok.encode("hi hi").tokens == ["<s>", "\u2581hi", "\u2581hi"]
    assert tok.decode(tok.encode("hi hi").ids) == "hi hi"
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert (config["bos_token"], config["eos_token"], config["unk_token"]) == ("<s>", "</s>", "<unk>")
    assert config["add_bos_token"] is True and config["chat_template"] == "{{ bos_token }}x"
    gguf_tokenizer.build(spm_meta(add_space_prefix=False), tmp_path / "bare", 4096)
    assert Tokenizer.from_file(str(tmp_path / "bare" / "tokenizer.json")).encode("hi").ids == [1, 7]


def test_a_byte_level_vocabulary_adds_bos_where_the_file_says_and_keeps_its_special_tokens(tmp_path: Path):
    """Llama 3's and DeepSeek's kind: BOS on every input (`add_bos_token`), a split regex the
    converter knows (`deepseek-r1-qwen`) on tokens as the file writes them, so a special token
    spelled outside the byte alphabet stays one token."""
    bos = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
    meta = tiny_meta(**{"tokenizer.ggml.pre": "deepseek-r1-qwen", "tokenizer.ggml.add_bos_token": True,
                        "tokenizer.ggml.tokens": [bos, "<|im_start|>", "<|im_end|>", "a", "b", "ab", "\u0120",
                                                  "\u0120a", "1", "2"]})
    assert gguf_tokenizer.build(meta, tmp_path, 8192) == {"bos": 1, "eos": 2}
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tok.encode("ab").ids == [1, 5] and tok.encode(f"{bos}ab").ids == [1, 0, 5]
    with pytest.raises(gguf_tokenizer.TokenizerError, match="'deepseek-coder'"):
        gguf_tokenizer.build(tiny_meta(**{"tokenizer.ggml.pre": "deepseek-coder"}), tmp_path / "x", 8192)


def test_a_gemma_4_vocabulary_adds_no_bos_to_text_as_its_own_tokenizer_though_the_file_says_to(tmp_path: Path):
    """Gemma 4's chat template writes `<bos>`, and its reference tokenizer (the one mlx-lm
    loads) adds none to text, whatever `add_bos_token` says; llama.cpp forces it on for raw
    text. The MLX engine answers as mlx-lm does: a raw prompt goes in as written."""
    meta = {**spm_meta(), "general.architecture": "gemma4", "tokenizer.ggml.model": "gemma4",
            "tokenizer.ggml.add_bos_token": True, "tokenizer.chat_template": "{{ bos_token }}{{ messages[0].content }}"}
    assert gguf_tokenizer.build(meta, tmp_path, 4096) == {"bos": 1, "eos": 2}
    assert Tokenizer.from_file(str(tmp_path / "tokenizer.json")).encode("hi").tokens == ["hi"]
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["add_bos_token"] is False and config["bos_token"] == "<s>"
