"""GGUF architectures beyond llama's, on one CPU node: a Qwen3 file is imported with MLX weights
(its per-head query and key norms mapped, its rotary embedding unpermuted) beside the file for
llama.cpp; a Granite file, which the import has no MLX layout for, for llama.cpp alone (llama.cpp
knows many more architectures than the MLX import maps); a llama file with a SentencePiece
vocabulary (Llama 2's kind of tokenizer, trained here by the sentencepiece library on a fixed
text, `spm_corpus.txt`, a snapshot of two of the project's docs kept apart so that editing the
docs changes no model here) with MLX weights and a tokenizer built by transformers' GGUF
converter. All are random-weight models made by `tools.random_gguf` (the first two with the real
model's tokenizer), with weights large enough that their greedy choices are decisive: llama.cpp's
runner answers as llama.cpp itself does, and so does the MLX runner on the Qwen3 and SentencePiece
files (a wrong norm, rotation or token would change the answer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration import batch_clients as bc
from tests.integration.gguf_files import sentencepiece_tokenizer
from tests.integration.harness import wait_until
from tests.integration.llama_parity import N, disagreement, first_tie, llama_reference
from tests.integration.patience import patience
from tests.integration.real_model import PROMPTS
from tests.integration.serving import http_json, ready_runners

QWEN3, QWEN3_MLX, GRANITE = "local/rand-qwen3", "local/rand-qwen3-mlx", "local/rand-granite"
SPM, SPM_MLX = "local/rand-spm", "local/rand-spm-mlx"
MLX_TWIN = {QWEN3_MLX: QWEN3, SPM_MLX: SPM}
SHAPE = ("--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--context", "2048",
         "--std", "0.5", "--embed-std", "2.0")
PROMPT = {QWEN3: PROMPTS[0], GRANITE: PROMPTS[3]}  # answers with no near-tie early on
TEXTS = ["Hello world", " a leading space", "Two  spaces and\nnew lines\n\n", "numbers 12345 and 3.14",
         "unicode: café, naïve, 日本語, emoji 🎉", "`llama_model_load_from_file` died", "[INST] hi [/INST]",
         "</s> and <s> in text", "tabs\tand\rreturns", ""]
DECISIVE = 12
"""Tokens of llama.cpp's own answer before its first near-tie, at least: the comparison is real."""


def dir_of(model_id: str) -> str:
    return model_id.replace("/", "--")


@pytest.fixture(scope="module")
def arch_models(tmp_path_factory: pytest.TempPathFactory, real_model: Path) -> dict[str, Path]:
    """The two random models, made with the real model's tokenizer and imported by the real CLI
    (the Qwen3 file twice: one id is placed on MLX)."""
    import subprocess
    import sys

    tmp = tmp_path_factory.mktemp("gguf-archs")
    tool = [sys.executable, "-m", "tools.random_gguf"]
    subprocess.run([*tool, "dump-tokenizer", str(real_model / "model.gguf"), str(tmp / "tokenizer.json")],
                   check=True, capture_output=True, timeout=patience(60))
    sentencepiece_tokenizer([Path(__file__).with_name("spm_corpus.txt")], tmp / "spm-tokenizer.json", vocab=4000)
    models = {}
    for arch, ids, tokenizer in (("qwen3", (QWEN3, QWEN3_MLX), "tokenizer.json"),
                                 ("granite", (GRANITE,), "tokenizer.json"),
                                 ("llama", (SPM, SPM_MLX), "spm-tokenizer.json")):
        made = tmp / f"{ids[0].split('-', 1)[1]}.gguf"
        subprocess.run([*tool, "make", str(tmp / tokenizer), str(made), "--arch", arch, *SHAPE],
                       check=True, capture_output=True, timeout=patience(60))
        for model_id in ids:
            added = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "add", str(made), "--id",
                                    model_id, "--home", str(tmp)], capture_output=True, text=True,
                                   timeout=patience(120))
            assert added.returncode == 0, added.stderr
            models[model_id] = tmp / "models" / dir_of(model_id)
    return models


@pytest.fixture(scope="module")
def arch_node(module_nodes, arch_models):
    node = module_nodes(args=("--place", QWEN3, "--place", GRANITE, "--place", SPM),
                        models={dir_of(m): d for m, d in arch_models.items()})
    for model_id in MLX_TWIN:
        status, placed = http_json(f"{node.url}/place_instance", {"model_id": model_id, "engine": "mlx"})
        assert status == 200, placed
    wait_until(node, lambda: len(ready_runners(node)) >= 5, 120, "the five runners ready")
    return node


def answer(node, model_id: str, logprobs: bool, prompt: str = "") -> dict:  # type: ignore[type-arg]
    body = {"model": model_id, "max_tokens": N, "temperature": 0, "logprobs": logprobs,
            "messages": [{"role": "user", "content": prompt or PROMPT[MLX_TWIN.get(model_id, model_id)]}]}
    status, reply = bc.complete(node.url, body)
    assert status == 200, reply
    return reply


def serving_engines(node, model_id: str) -> tuple[list[str], list[str]]:
    _, listed = http_json(f"{node.url}/v1/models")
    entry = next(m for m in listed["data"] if m["id"] == model_id)
    return entry["engines"], entry["serving_engines"]


def test_a_qwen3_gguf_gets_mlx_weights_and_both_engines_answer_as_llama_cpp(arch_node, arch_models):
    qwen3 = arch_models[QWEN3]
    assert (qwen3 / "model.safetensors").is_file() and (qwen3 / "model.gguf").is_file()
    assert serving_engines(arch_node, QWEN3) == (["mlx", "llama_cpp"], ["llama_cpp"])
    assert serving_engines(arch_node, QWEN3_MLX) == (["mlx", "llama_cpp"], ["mlx"])
    (ref,) = llama_reference(qwen3, [PROMPT[QWEN3]], N)
    assert first_tie(ref) >= DECISIVE, ref["tokens"]
    llama = answer(arch_node, QWEN3, logprobs=True)
    text = llama["choices"][0]["message"]["content"]
    assert disagreement(text, ref, llama) == ""
    mlx = answer(arch_node, QWEN3_MLX, logprobs=False)["choices"][0]["message"]["content"]
    assert disagreement(mlx, trimmed(ref)) == "", (mlx, text)


def trimmed(ref: dict) -> dict:  # type: ignore[type-arg]
    """llama.cpp's answer as mlx-lm's detokenizer writes it: without the first token's leading
    space (mlx-lm's own `generate` drops it too)."""
    (piece, *rest), *tokens = ref["tokens"]
    return {**ref, "text": ref["text"].removeprefix(" "), "tokens": [[piece.removeprefix(" "), *rest], *tokens]}


def test_an_architecture_with_no_mlx_layout_is_served_by_llama_cpp_alone(arch_node, arch_models):
    granite = arch_models[GRANITE]
    assert not list(granite.glob("*.safetensors")) and (granite / "model.gguf").is_file()
    assert "no MLX layout here for the granite architecture" in (granite / "README.md").read_text()
    assert serving_engines(arch_node, GRANITE) == (["llama_cpp"], ["llama_cpp"])
    status, refused = http_json(f"{arch_node.url}/place_instance", {"model_id": GRANITE, "engine": "mlx"})
    assert status == 400 and "no MLX weights" in refused["error"]["message"], refused
    (ref,) = llama_reference(granite, [PROMPT[GRANITE]], N)
    assert first_tie(ref) >= DECISIVE, ref["tokens"]
    reply = answer(arch_node, GRANITE, logprobs=True)
    assert disagreement(reply["choices"][0]["message"]["content"], ref, reply) == ""


def test_a_sentencepiece_gguf_tokenizes_and_answers_as_llama_cpp_on_both_engines(arch_node, arch_models):
    """Llama 2's kind of vocabulary (pieces and scores, byte fallback, BOS added): the tokenizer
    the import writes (transformers' converter) encodes text, special tokens included, to the ids
    llama.cpp's own tokenizer gives; the MLX runner and the llama.cpp runner answer as llama.cpp."""
    import llama_cpp
    from transformers import AutoTokenizer

    spm = arch_models[SPM]
    assert (spm / "model.safetensors").is_file() and (spm / "model.gguf").is_file()
    tok = AutoTokenizer.from_pretrained(str(spm))
    vocab = llama_cpp.Llama(str(spm / "model.gguf"), vocab_only=True, verbose=False)
    for text in TEXTS:
        assert tok.encode(text) == vocab.tokenize(text.encode(), add_bos=True, special=True), text
    assert serving_engines(arch_node, SPM) == (["mlx", "llama_cpp"], ["llama_cpp"])
    # A prompt whose answer is decisive and has no lone byte token: llama.cpp's binding drops an
    # undecodable byte from its text where the engines (as llama-server and mlx-lm) write U+FFFD.
    refs = llama_reference(spm, PROMPTS, N)
    chosen = [(p, r) for p, r in zip(PROMPTS, refs) if first_tie(r) >= DECISIVE and all(t[0] for t in r["tokens"])]
    assert chosen, [(first_tie(r), r["text"]) for r in refs]
    prompt, ref = chosen[0]
    llama = answer(arch_node, SPM, logprobs=True, prompt=prompt)
    assert disagreement(llama["choices"][0]["message"]["content"], ref, llama) == ""
    mlx = answer(arch_node, SPM_MLX, logprobs=False, prompt=prompt)["choices"][0]["message"]["content"]
    assert disagreement(mlx, trimmed(ref)) == "", (mlx, ref["text"])
