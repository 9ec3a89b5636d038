"""One node serving the demo model through the OpenAI-compatible API, with the real engine."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time

import openai
import pytest

from skulk.scripts.demo_model import ARCH as DEMO_ARCH
from tests.integration.conftest import DEMO_DIR
from tests.integration.patience import patience
from tests.integration.serving import MODEL, NO_RESUME, http_json, sse_events, wait_model_ready

PROMPT = "Beautiful is better than ugly."
DEMO_CONTEXT = DEMO_ARCH["max_position_embeddings"]


def serve(start, demo_model, config=None):
    node = start(args=("--place", MODEL), models={DEMO_DIR: demo_model}, config=config)
    # A node's own models are listed from the API's first answer (before its master has a state
    # or has indexed the store's first catalog report).
    listed = http_json(f"{node.url}/v1/models")[1]["data"]
    assert [m["id"] for m in listed] == [MODEL], listed
    t0 = time.monotonic()
    runner = wait_model_ready(node)
    print(f"demo model ready {time.monotonic() - t0:.2f}s after the node's roles")
    node.runner_id = runner  # type: ignore[attr-defined]
    return node


@pytest.fixture(scope="module")
def shared(module_nodes, demo_model):
    """One node for the tests that leave it serving as it was."""
    return serve(module_nodes, demo_model)


@pytest.fixture
def serving(nodes, demo_model):
    """A node of the test's own, for tests that kill its runner or delete its instance (and
    check the error its clients get: a lost stream does not go on elsewhere)."""
    return serve(nodes, demo_model, config=NO_RESUME)


def client(node) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{node.url}/v1", api_key="none", max_retries=0, timeout=60)


def test_openai_client_streams_and_does_not_stream(shared):
    c = client(shared)
    full = c.chat.completions.create(model=MODEL, max_tokens=8, temperature=0,
                                     messages=[{"role": "user", "content": PROMPT}])
    assert full.choices[0].finish_reason in ("length", "stop")
    assert full.usage.completion_tokens >= 1 and full.usage.prompt_tokens > 5
    pieces, finish, usage = [], None, None
    for chunk in c.chat.completions.create(model=MODEL, max_tokens=8, temperature=0, stream=True,
                                           messages=[{"role": "user", "content": PROMPT}]):
        pieces.append(chunk.choices[0].delta.content or "")
        finish = chunk.choices[0].finish_reason or finish
        usage = chunk.usage or usage
    assert "".join(pieces) == full.choices[0].message.content
    assert finish == full.choices[0].finish_reason
    assert usage.completion_tokens == full.usage.completion_tokens
    assert [m.id for m in c.models.list().data] == [MODEL]


def test_greedy_output_equals_in_process_mlx_lm(serving, demo_model):
    """On a node of its own: a cold prefill (nothing in the prefix cache) against mlx-lm's."""
    shared = serving
    n = 24
    ref = json.loads(subprocess.run(
        [sys.executable, "-m", "tests.integration.reference_generate", str(demo_model), str(n), PROMPT],
        capture_output=True, text=True, timeout=patience(40), check=True).stdout)
    status, body = http_json(f"{shared.url}/v1/chat/completions", {
        "model": MODEL, "max_tokens": n, "temperature": 0, "logprobs": True,
        "messages": [{"role": "user", "content": PROMPT}]})
    assert status == 200, body
    got = [[c["bytes"], c["logprob"]] for c in body["choices"][0]["logprobs"]["content"]]
    assert body["choices"][0]["message"]["content"] == ref["text"]
    assert body["usage"]["completion_tokens"] == len(ref["tokens"])
    assert [g[0] for g in got] == [r[0] for r in ref["tokens"]]
    assert [g[1] for g in got] == pytest.approx([r[1] for r in ref["tokens"]], abs=1e-4)
    print(f"greedy: {len(got)} tokens identical to in-process mlx_lm")


def test_client_disconnect_frees_the_runner(shared):
    runner_log = shared.home / "logs" / f"{shared.runner_id}.log"
    seen = runner_log.stat().st_size  # the shared node's log so far: only what follows counts
    conn = http.client.HTTPConnection("127.0.0.1", shared.api_port, timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": MODEL, "max_tokens": 1900, "stream": True, "temperature": 0,
        "messages": [{"role": "user", "content": PROMPT}]}), {"Content-Type": "application/json"})
    events = sse_events(conn.getresponse())
    tokens = 0
    for kind, payload in events:
        if kind == "data" and payload != "[DONE]" and "choices" in payload:
            tokens += 1
            if tokens == 3:
                break
    conn.sock.shutdown(2)
    conn.close()
    t0 = time.monotonic()
    status, body = http_json(f"{shared.url}/v1/chat/completions", {
        "model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "next"}]})
    took = time.monotonic() - t0
    print(f"after a disconnect, the next request was served in {took:.3f}s")
    assert status == 200, body
    with open(runner_log, "rb") as f:
        f.seek(seen)
        log = f.read().decode(errors="replace")
    assert "cancelled" in log or "client of" in log


@pytest.mark.parametrize("body,status,needle", [
    (b"{not json", 400, "malformed JSON"),
    (b"", 400, "body is required"),
    ({"messages": [{"role": "user", "content": "x"}]}, 400, "model is required"),
    ({"model": MODEL}, 400, "messages is required"),
    ({"model": MODEL, "messages": []}, 400, "no content to generate from"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}, 400,
     "must be a positive integer"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "top_p": 3}, 400, "top_p"),
    ({"model": "nobody/nothing", "messages": [{"role": "user", "content": "x"}]}, 404,
     "No instance found for model nobody/nothing"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 10 ** 6}, 400,
     "context_length_exceeded"),
])
def test_bad_requests_get_the_upstream_envelope(shared, body, status, needle):
    got, payload = http_json(f"{shared.url}/v1/chat/completions", body)
    assert got == status
    assert set(payload) == {"error"} and payload["error"]["code"] == status
    assert needle in payload["error"]["message"] and payload["error"]["param"] is None
    ok, _ = http_json(f"{shared.url}/v1/chat/completions", {
        "model": MODEL, "max_tokens": 2, "unknown_field": {"ignored": True},
        "messages": [{"role": "user", "content": "still serving?"}]})
    assert ok == 200


def test_max_tokens_may_be_omitted_and_stop_strings_end_generation(shared):
    """Without max_tokens an answer may fill what the context leaves after its prompt. A prompt
    of most of the demo model's context keeps that short (a short prompt's answer ran ~2,000
    tokens: 44 s at a third of a 2-core machine)."""
    long = " ".join([PROMPT] * 300)  # ~1,900 tokens
    status, body = http_json(f"{shared.url}/v1/chat/completions", {
        "model": MODEL, "temperature": 0, "seed": 1,
        "messages": [{"role": "user", "content": long}]}, timeout=120)
    assert status == 200, body
    usage, finish = body["usage"], body["choices"][0]["finish_reason"]
    total = usage["prompt_tokens"] + usage["completion_tokens"]  # an end of sequence may come first
    assert 0 < usage["completion_tokens"] < 300 and (total == DEMO_CONTEXT if finish == "length" else
                                                     finish == "stop" and total < DEMO_CONTEXT), (finish, usage)
    text = body["choices"][0]["message"]["content"]
    if len(text) >= 3:  # greedy: the same text again, cut before a stop string taken from it
        stop = text[1:3]
        status, cut = http_json(f"{shared.url}/v1/chat/completions", {
            "model": MODEL, "temperature": 0, "stop": [stop], "max_tokens": 50,
            "messages": [{"role": "user", "content": long}]})
        assert status == 200 and cut["choices"][0]["finish_reason"] == "stop"
        assert stop not in cut["choices"][0]["message"]["content"]


def test_kill9_of_the_runner_mid_stream_ends_the_stream_with_an_error(serving):
    pid = serving.status()[serving.runner_id].pid
    conn = http.client.HTTPConnection("127.0.0.1", serving.api_port, timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": MODEL, "max_tokens": 1900, "stream": True, "temperature": 0,  # greedy: no early EOS
        "messages": [{"role": "user", "content": PROMPT}]}), {"Content-Type": "application/json"})
    frames = []
    killed_at = None
    for kind, payload in sse_events(conn.getresponse()):
        frames.append((kind, payload))
        if killed_at is None and kind == "data" and "choices" in payload:
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
        if kind == "data" and isinstance(payload, dict) and "error" in payload:
            took = time.monotonic() - killed_at
            break
    else:
        pytest.fail(f"stream ended without an error event: {frames[-3:]}")
    print(f"runner SIGKILLed mid-stream: client got the error event {took:.3f}s later")
    assert "Runner shutdown before completing command" in payload["error"]["message"]
    assert payload["error"]["code"] == 500
    # The runner is restarted under its supervisor and the model is served again (by a new runner:
    # on a fast machine the error reaches the client before the state says the old one is gone).
    wait_model_ready(serving, timeout=60, exclude=(serving.runner_id,))
    status, _ = http_json(f"{serving.url}/v1/chat/completions", {
        "model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "again"}]})
    assert status == 200


def test_state_and_instance_endpoints(serving):
    _, state = http_json(f"{serving.url}/state")
    (iid, inst), = state["instances"].items()
    ring = inst["MlxRingInstance"]
    shard = ring["shardAssignments"]["runnerToShard"][serving.runner_id]["PipelineShardMetadata"]
    assert ring["shardAssignments"]["modelId"] == MODEL and shard["worldSize"] == 1
    assert shard["startLayer"] == 0 and shard["endLayer"] == shard["nLayers"] == 4
    _, node_id = http_json(f"{serving.url}/node_id")
    assert ring["shardAssignments"]["nodeToRunner"] == {node_id: serving.runner_id}
    acc = state["nodeSystem"][node_id]["accelerator"]  # what the node computes on, and its runner says
    assert acc["kind"] in ("cpu", "cuda", "metal") and acc["name"] and acc["backend"].startswith("mlx-"), acc
    diag = http_json(f"{serving.url}/v1/diagnostics/node")[1]
    assert diag["identity"]["accelerator"] == acc
    runner_log = (serving.home / "logs" / f"{serving.runner_id}.log").read_text()
    assert f"device: {dict(cpu='CPU', cuda='CUDA', metal='Metal')[acc['kind']]} (" in runner_log
    assert node_id in state["nodeIdentities"] and node_id in state["nodeMemory"]
    assert http_json(f"{serving.url}/instance/{iid}")[1] == inst
    assert http_json(f"{serving.url}/instance/nope")[0] == 404
    assert http_json(f"{serving.url}/health")[1]["status"] == "idle"
    status, body = http_json(f"{serving.url}/instance/{iid}", method="DELETE")
    assert status == 200 and body["instance_id"] == iid
    status, body = http_json(f"{serving.url}/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "x"}]})
    assert status == 404
