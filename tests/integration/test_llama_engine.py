"""The llama.cpp engine with the real model: a node on a CPU, given no engine, serves the demo
model's GGUF file through llama.cpp, and its greedy answers are llama.cpp's own on the same file
(the binding's single-sequence `Llama`, in a subprocess): alone, eight at once, through every
client shape; stop strings, max_tokens, a JSON schema, a cancelled stream, a stream that joins a
running batch, a runner killed mid-stream.

llama.cpp's CPU kernels are not batch-invariant: its flash attention takes other code paths for a
single query over a long cache (split across threads) and for many queries (tiled), and a
prefix reused from the cache was computed in another batch, so a log-probability moves with the
batch's shape (by up to 0.25 nats on this model on an AVX2 Zen 3, eight prompts at once against
one alone; 0.5 on an AVX-512 Zen 4, where llama.cpp's own batch of eight moves it 0.38). An answer
therefore equals llama.cpp's token for token, each log-probability within `tolerance` of
llama.cpp's (`llama_parity.py`: `TIE` plus twice llama.cpp's own spread on this CPU), up to the
first place, if any, where llama.cpp's own two best tokens are within it (a tie the batch's shape
may break either way). A wrong position, a row reading another row's cache or a skipped token
moves logits by whole nats, not by this."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.integration import batch_clients as bc
from tests.integration.harness import wait_until
from tests.integration.llama_parity import N, disagreement, llama_reference
from tests.integration.patience import patience
from tests.integration.real_model import PROMPTS, REAL, REAL_DIR
from tests.integration.serving import (
    NO_RESUME,
    abandon_after,
    http_json,
    sse_events,
    wait_model_ready,
)

COPY = ("Repeat this list exactly, one item per line, and nothing else: apples, oranges, pears, plums, "
        "cherries, grapes, lemons, limes, figs, dates, melons, peaches.")


@pytest.fixture(scope="module")
def references(real_model: Path) -> list[dict[str, Any]]:
    """llama.cpp's own answers to PROMPTS and then to COPY (one subprocess, one model load)."""
    return llama_reference(real_model, [*PROMPTS, COPY], N)


@pytest.fixture(scope="module")
def reference(references) -> list[dict[str, Any]]:
    return references[:len(PROMPTS)]


@pytest.fixture(scope="module")
def llama_node(module_nodes, real_model):
    node = module_nodes("llama", args=("--place", REAL), models={REAL_DIR: real_model},  # NO_RESUME: a killed
                        config=NO_RESUME)  # runner's error is tested
    wait_model_ready(node, timeout=180)
    return node


def ask(prompt: str, **extra: Any) -> dict[str, Any]:
    return {"model": REAL, "max_tokens": N, "temperature": 0, "messages": [{"role": "user", "content": prompt}],
            **extra}


def content(reply: dict[str, Any]) -> str:
    return reply["choices"][0]["message"]["content"]


def test_a_cpu_node_serves_the_gguf_through_llama_cpp_and_says_so(llama_node, real_model):
    _, state = http_json(f"{llama_node.url}/state")
    (inst,) = state["instances"].values()
    assert inst["MlxRingInstance"]["engine"] == "llama_cpp"
    (runner,) = state["runners"].values()
    assert runner["RunnerReady"]["enginePath"].startswith("llama.cpp CPU"), runner
    (node_id,) = state["nodeSystem"]
    assert "llama_cpp" in state["nodeSystem"][node_id]["engines"]
    _, models = http_json(f"{llama_node.url}/v1/models")
    entry = next(m for m in models["data"] if m["id"] == REAL)
    assert entry["engines"] == ["mlx", "llama_cpp"] and entry["serving_engines"] == ["llama_cpp"]
    previews = http_json(f"{llama_node.url}/instance/previews?model_id={REAL}")[1]["previews"]
    one = next(p for p in previews if not p["error"] and len(p["memory_delta_by_node"]) == 1)
    (held,) = one["memory_delta_by_node"].values()
    gguf = (real_model / "model.gguf").stat().st_size
    assert held == gguf, (held, gguf)  # the file as stored, not a 538 MB fp32 copy
    status, refused = http_json(f"{llama_node.url}/place_instance", {"model_id": REAL, "engine": "vllm"})
    assert status == 400 and "engine must be one of auto, mlx, llama_cpp" in refused["error"]["message"], refused
    assert (real_model / "model.gguf").stat().st_ino == (real_model.parent.parent / "cache" / "packages" /
                                                         "SmolLM2-135M-Instruct.Q4_1.gguf").stat().st_ino


def test_each_answer_is_llama_cpps_own(llama_node, reference):
    """One after the other: each prompt after the first shares the chat template's opening with
    the one before, restored from the prefix cache (kept in host memory) into its own sequence."""
    cached = []
    for prompt, ref in zip(PROMPTS, reference):
        status, reply = bc.complete(llama_node.url, ask(prompt, logprobs=True))
        assert status == 200, reply
        assert disagreement(content(reply), ref, reply) == "", prompt
        cached.append(reply["usage"]["prompt_tokens_details"]["cached_tokens"])
        if content(reply) == ref["text"]:  # the end-of-turn token is counted here, not in llama.cpp's list
            eos = reply["choices"][0]["finish_reason"] == "stop"
            assert reply["usage"]["completion_tokens"] == len(ref["tokens"]) + eos
        print(f"{prompt!r} -> {content(reply)!r}")
    assert "Paris" in reference[0]["text"]
    assert all(n > 8 for n in cached[1:]), cached  # not vacuous: the later prompts came from the cache


def test_the_eight_prompts_at_once_give_llama_cpps_answers(llama_node, reference):
    together = bc.all_at_once(llama_node.url, [ask(p, logprobs=True) for p in PROMPTS])
    same = 0
    for prompt, ref, (status, reply) in zip(PROMPTS, reference, together):
        assert status == 200, reply
        assert disagreement(content(reply), ref, reply) == "", prompt
        same += content(reply) == ref["text"]
    print(f"8 at once: {same} of 8 answers identical, the rest part at a near-tie")


def test_every_client_shape_gets_the_same_text(llama_node, reference):
    prompt, ref = PROMPTS[0], reference[0]
    user = [{"role": "user", "content": prompt}]
    conn = http.client.HTTPConnection("127.0.0.1", llama_node.api_port, timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps({**ask(prompt), "stream": True}),
                 {"Content-Type": "application/json"})
    streamed = "".join(p["choices"][0]["delta"].get("content") or "" for kind, p in sse_events(conn.getresponse())
                       if kind == "data" and p != "[DONE]" and p.get("choices"))
    conn.close()
    assert disagreement(streamed, ref) == ""
    status, msg = http_json(f"{llama_node.url}/v1/messages", {"model": REAL, "max_tokens": N, "temperature": 0,
                                                              "messages": user})
    assert status == 200, msg
    assert disagreement("".join(b["text"] for b in msg["content"] if b["type"] == "text"), ref) == ""
    status, resp = http_json(f"{llama_node.url}/v1/responses", {"model": REAL, "max_output_tokens": N,
                                                                "temperature": 0, "input": prompt})
    assert status == 200, resp
    assert disagreement("".join(c["text"] for o in resp["output"] if o["type"] == "message"
                                for c in o["content"]), ref) == ""
    status, chat = http_json(f"{llama_node.url}/api/chat", {"model": REAL, "stream": False, "messages": user,
                                                            "options": {"temperature": 0, "num_predict": N}})
    assert status == 200 and disagreement(chat["message"]["content"], ref) == "", chat


def test_legacy_completions_of_a_raw_prompt_are_llama_cpps(llama_node, real_model):
    raw = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,"]
    for prompt, ref in zip(raw, llama_reference(real_model, raw, 16, raw=True)):
        status, reply = http_json(f"{llama_node.url}/v1/completions", {"model": REAL, "prompt": prompt,
                                                                        "max_tokens": 16, "temperature": 0})
        assert status == 200, reply
        assert disagreement(reply["choices"][0]["text"], ref) == "", prompt


def test_max_tokens_stop_strings_and_logprobs(llama_node, reference):
    ref = reference[6]  # 'Explain in one sentence what a CPU does.'
    status, cut = bc.complete(llama_node.url, {**ask(PROMPTS[6]), "max_tokens": 5, "logprobs": True,
                                               "top_logprobs": 2})
    assert status == 200 and cut["choices"][0]["finish_reason"] == "length"
    assert cut["usage"]["completion_tokens"] == 5
    assert ref["text"].startswith(content(cut)) or disagreement(content(cut), ref) == ""
    steps = cut["choices"][0]["logprobs"]["content"]
    assert len(steps) == 5 and all(len(s["top_logprobs"]) == 2 for s in steps)
    for step, (piece, logprob, _margin) in zip(steps, ref["tokens"]):
        assert step["token"] == piece and step["logprob"] == pytest.approx(logprob, abs=0.05)
    words = ref["text"].split()
    stop = " " + words[len(words) // 2]
    status, stopped = bc.complete(llama_node.url, {**ask(PROMPTS[6]), "stop": [stop]})
    assert status == 200 and stopped["choices"][0]["finish_reason"] == "stop"
    assert stop not in content(stopped) and ref["text"].startswith(content(stopped))


def test_a_json_schema_gives_valid_json(llama_node):
    import jsonschema

    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    status, reply = bc.complete(llama_node.url, {
        **ask("What is the capital of France? Answer in JSON with the city and the country."), "max_tokens": 60,
        "response_format": {"type": "json_schema", "json_schema": {"name": "capital", "schema": schema}}})
    assert status == 200, reply
    answer = json.loads(content(reply))
    jsonschema.validate(answer, schema)
    print(f"schema-constrained answer: {answer}")


def test_a_stream_joins_a_running_batch_and_a_cancelled_one_leaves_it(llama_node, reference):
    results: dict[str, Any] = {}

    def long_one() -> None:
        results["long"] = bc.complete(llama_node.url, ask("Tell me a long story about a dragon.", max_tokens=200))

    runner = threading.Thread(target=long_one)
    runner.start()
    conn = http.client.HTTPConnection("127.0.0.1", llama_node.api_port, timeout=60)  # a stream to cancel
    abandon_after(conn, "/v1/chat/completions", ask("Count from one to a thousand.", max_tokens=1000, stream=True), 3)
    status, joined = bc.complete(llama_node.url, ask(PROMPTS[3]))  # joins while the long one decodes
    runner.join(300)
    assert status == 200 and disagreement(content(joined), reference[3]) == ""
    assert results["long"][0] == 200 and results["long"][1]["usage"]["completion_tokens"] > 24
    def idle() -> bool:  # the cancelled row is out of the batch: nothing runs (re-checked on every bus event)
        _, clusters = http_json(f"{llama_node.url}/admin/clusters")
        return [p["activeRequests"] for c in clusters["clusters"] for p in c["pools"]] == [0]

    wait_until(llama_node, idle, 60, "the runner's batch empty after the cancel")


def test_a_runner_killed_mid_stream_ends_the_stream_with_an_error(llama_node):
    runner = wait_model_ready(llama_node)
    pid = llama_node.status()[runner].pid
    conn = http.client.HTTPConnection("127.0.0.1", llama_node.api_port, timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps(ask("Count from one to a thousand.", max_tokens=1000,
                                                                stream=True)), {"Content-Type": "application/json"})
    killed = False
    for kind, payload in sse_events(conn.getresponse()):
        if not killed and kind == "data" and isinstance(payload, dict) and payload.get("choices"):
            os.kill(pid, signal.SIGKILL)
            killed = True
        if kind == "data" and isinstance(payload, dict) and "error" in payload:
            break
    else:
        pytest.fail("the stream ended without an error event")
    assert payload["error"]["code"] == 500
    # re-created, on llama.cpp again (a new runner: on a fast machine the error reaches the client
    # before the state says the old one is gone)
    wait_model_ready(llama_node, timeout=120, exclude=(runner,))
    status, reply = bc.complete(llama_node.url, ask(PROMPTS[0]))
    assert status == 200


@pytest.fixture(scope="module")
def lookup_node(module_nodes, real_model):
    """A node whose llama.cpp runner speculates by prompt lookup (`llama_node` is the control)."""
    node = module_nodes("lookup", args=("--place", REAL), models={REAL_DIR: real_model},
                        config={"speculative": {"mode": "prompt_lookup", "num_draft_tokens": 4}})
    wait_model_ready(node, timeout=180)
    return node


def test_prompt_lookup_speculation_keeps_llama_cpps_answers(lookup_node, llama_node, references):
    """Drafts from the prompt, verified in one llama_decode: the greedy answers stay llama.cpp's
    own (up to a near-tie, as for eight rows at once), a copying answer keeps drafts, and so does
    a sampled one."""
    runners = http_json(f"{lookup_node.url}/state")[1]["runners"]
    assert [r["RunnerReady"]["speculation"] for r in runners.values() if "RunnerReady" in r] == \
        ["prompt_lookup x4, up to 1 stream"], runners
    for prompt, ref in zip(PROMPTS, references):
        status, reply = bc.complete(lookup_node.url, ask(prompt, logprobs=True))
        assert status == 200 and disagreement(content(reply), ref, reply) == "", (prompt, reply)
    copy_ref = references[len(PROMPTS)]
    copy = ask(COPY, logprobs=True)
    status, spec = bc.complete(lookup_node.url, copy)
    assert status == 200 and disagreement(content(spec), copy_ref, spec) == "", spec
    kept = spec["usage"]["completion_tokens_details"]["accepted_prediction_tokens"]
    assert kept > 0, spec["usage"]  # a copying answer keeps drafts
    plain = bc.complete(llama_node.url, copy)[1]
    assert plain["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] == 0
    # A sampled row keeps a draft while its own seeded sampler draws it. (Its text is a draw: it
    # need not repeat token for token, nor copy the list, since llama.cpp's logits move with the
    # batch's shape and the CPU, and a draw near a boundary may fall the other way and wander.)
    status, sampled = bc.complete(lookup_node.url, {**ask(COPY, max_tokens=40), "temperature": 0.7, "seed": 1234})
    details = sampled["usage"]["completion_tokens_details"]
    assert status == 200 and details["accepted_prediction_tokens"] + details["rejected_prediction_tokens"] > 0, \
        details
    assert content(sampled).strip() and sampled["usage"]["completion_tokens"] > 0, sampled
    print(f"prompt lookup on llama.cpp: {kept} drafts kept of {spec['usage']['completion_tokens']} tokens")


def test_a_gguf_llama_cpp_cannot_load_is_served_by_mlx_instead(nodes, real_model, tmp_path):
    damaged = tmp_path / REAL_DIR  # the same model, its GGUF cut short (a download that stopped)
    damaged.mkdir()
    for entry in real_model.iterdir():
        if entry.name == "model.gguf":
            with entry.open("rb") as whole:
                (damaged / entry.name).write_bytes(whole.read(1 << 20))
        else:
            (damaged / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
    node = nodes(args=("--place", REAL), models={REAL_DIR: damaged})
    wait_model_ready(node, timeout=180)
    _, state = http_json(f"{node.url}/state")
    (inst,) = state["instances"].values()
    assert inst["MlxRingInstance"]["engine"] == "mlx"
    (note,) = state["deletedInstances"].values()
    assert note["cause"] == "engine_refused", note
    assert "placing it again without llama_cpp" in note["reason"], note
    assert "llama_cpp cannot run" in note["reason"], note  # the runner's own words, whichever came first
    status, reply = bc.complete(node.url, ask(PROMPTS[0]))
    assert status == 200 and content(reply), reply
    assert node.status()["runners"].restarts == 0  # no crash loop: one refusal, one placement


QUANTIZE = ("import sys, llama_cpp; p = llama_cpp.llama_model_quantize_default_params(); "
            "p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M; p.allow_requantize = True; "
            "sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))")


def test_a_k_quant_gguf_is_imported_for_llama_cpp_alone_and_served(nodes, real_model, tmp_path):
    """The GGUF files people download are mostly K-quants, which mlx cannot read: `skulk model add`
    imports one for llama.cpp alone (no MLX weights), the card says so, MLX is refused with the
    reason, and a node serves it through llama.cpp with llama.cpp's own answer."""
    k_quant = tmp_path / "smollm2.Q4_K_M.gguf"
    subprocess.run([sys.executable, "-c", QUANTIZE, str(real_model / "model.gguf"), str(k_quant)],
                   check=True, capture_output=True, timeout=patience(120))
    home = tmp_path / "import-home"
    added = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "add", str(k_quant),
                            "--id", "local/smollm2-k", "--home", str(home)],
                           capture_output=True, text=True, timeout=patience(120))
    assert added.returncode == 0, added.stderr
    model_dir = home / "models" / "local--smollm2-k"
    assert not list(model_dir.glob("*.safetensors")) and (model_dir / "model.gguf").is_file()
    assert "GGUF only, for llama.cpp (mlx has no layout of its own for Q" in (model_dir / "README.md").read_text()
    assert not (home / "models" / ".partial").exists() or not any((home / "models" / ".partial").iterdir())

    damaged = tmp_path / "local--smollm2-cut"  # the same directory, its GGUF cut short
    damaged.mkdir()
    for entry in model_dir.iterdir():
        (damaged / entry.name).write_bytes(entry.read_bytes()[:1 << 20] if entry.name == "model.gguf"
                                           else entry.read_bytes())

    ref = llama_reference(model_dir, [PROMPTS[0]], N)[0]
    node = nodes(args=("--place", "local/smollm2-k"), models={"local--smollm2-k": model_dir,
                                                              "local--smollm2-cut": damaged})
    wait_model_ready(node, timeout=180)
    _, state = http_json(f"{node.url}/state")
    (inst,) = state["instances"].values()
    assert inst["MlxRingInstance"]["engine"] == "llama_cpp"
    _, models = http_json(f"{node.url}/v1/models")
    assert any(m["id"] == "local/smollm2-k" for m in models["data"]), models
    status, reply = bc.complete(node.url, {**ask(PROMPTS[0], logprobs=True), "model": "local/smollm2-k"})
    assert status == 200 and disagreement(content(reply), ref, reply) == "", reply
    status, refused = http_json(f"{node.url}/place_instance", {"model_id": "local/smollm2-k", "engine": "mlx"})
    assert status == 400 and "no MLX weights" in json.dumps(refused), (status, refused)

    # A file llama.cpp cannot load, with no other engine to fall back on: given up at its first
    # refusal with the reason (no crash loop), and `skulk model wait` says so instead of waiting.
    # (the wait begins first, as an operator's would: a deletion from before a wait is history to it)
    wait = subprocess.Popen([sys.executable, "-m", "skulk.scripts.cli", "model", "wait", "local/smollm2-cut",
                             "--url", node.url, "--timeout", str(patience(120))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait.stderr is not None and wait.stderr.readline().startswith("waiting for local/smollm2-cut")
        status, placed = http_json(f"{node.url}/place_instance", {"model_id": "local/smollm2-cut"})
        assert status == 200, placed
        _, err = wait.communicate(timeout=patience(150))
    finally:
        wait.kill()
    assert wait.returncode == 1 and "will not be ready" in err, err
    assert "no other engine can run it" in err and "llama_cpp cannot run" in err, err  # its own words too
    assert node.status()["runners"].restarts == 0
