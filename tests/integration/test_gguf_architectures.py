"""GGUF architectures beyond llama's, on one CPU node: a Qwen3 file is imported with MLX weights
(its per-head query and key norms mapped, its rotary embedding unpermuted) beside the file for
llama.cpp; a Granite file, which the import has no MLX layout for, for llama.cpp alone (llama.cpp
knows many more architectures than the MLX import maps). Both are random-weight models of the
real model's tokenizer made by `tools.random_gguf`, with weights large enough that their greedy
choices are decisive: llama.cpp's runner answers as llama.cpp itself does, and so does the MLX
runner on the Qwen3 file (a wrong norm or rotation would change every token)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration import batch_clients as bc
from tests.integration.harness import wait_until
from tests.integration.llama_parity import N, disagreement, first_tie, llama_reference
from tests.integration.patience import patience
from tests.integration.real_model import PROMPTS
from tests.integration.serving import compute_threads, http_json, ready_runners

QWEN3, QWEN3_MLX, GRANITE = "local/rand-qwen3", "local/rand-qwen3-mlx", "local/rand-granite"
SHAPE = ("--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--context", "2048",
         "--std", "0.5", "--embed-std", "2.0")
PROMPT = {QWEN3: PROMPTS[0], GRANITE: PROMPTS[3]}  # prompts whose answers have no near-tie early on
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
    models = {}
    for arch, ids in (("qwen3", (QWEN3, QWEN3_MLX)), ("granite", (GRANITE,))):
        made = tmp / f"{arch}.gguf"
        subprocess.run([*tool, "make", str(tmp / "tokenizer.json"), str(made), "--arch", arch, *SHAPE],
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
    node = module_nodes(args=("--place", QWEN3, "--place", GRANITE),
                        models={dir_of(m): d for m, d in arch_models.items()},
                        config={"runner": {"threads": compute_threads()}})
    status, placed = http_json(f"{node.url}/place_instance", {"model_id": QWEN3_MLX, "engine": "mlx"})
    assert status == 200, placed
    wait_until(node, lambda: len(ready_runners(node)) >= 3, 120, "the three runners ready")
    return node


def answer(node, model_id: str, logprobs: bool) -> dict:  # type: ignore[type-arg]
    body = {"model": model_id, "max_tokens": N, "temperature": 0, "logprobs": logprobs,
            "messages": [{"role": "user", "content": PROMPT[QWEN3 if model_id == QWEN3_MLX else model_id]}]}
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
