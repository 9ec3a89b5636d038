"""A stream outlives its instance: the real model on two nodes of three (MLX: its prefill and
decode are bit-identical on the CPU, so a resumed greedy answer can be compared exactly), a
greedy stream through the third node's API, the node serving it SIGKILLed mid-answer. The
client gets one stream with no error whose text is the undisturbed answer, token for token,
and whose usage counts the prompt once and every token once. And every client shape goes on
after its runner crashes mid-answer (the demo model on one node)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import uuid
from typing import Any

import anthropic
import ollama
import openai

from tests.integration import batch_clients as bc
from tests.integration.cluster import FAST, converged, node_args, state_of
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import wait_until
from tests.integration.patience import patience
from tests.integration.real_model import REAL, REAL_DIR
from tests.integration.serving import MODEL, http_json, sse_events, wait_model_ready

MLX = {"runner": {"engine": "mlx"}}
PROMPT = "Write a short story about a fox who finds a lantern in the forest."
TOKENS = 48
SHAPE_PROMPT = "Tell me about the sea."


def ready_instances(node) -> dict[str, str]:
    """instance id -> its node, for every instance whose runner is ready."""
    state = state_of(node) or {"instances": {}, "runners": {}}
    out = {}
    for iid, inst in state["instances"].items():
        shards = inst["MlxRingInstance"]["shardAssignments"]
        (node_id, runner), = shards["nodeToRunner"].items()
        if "RunnerReady" in state["runners"].get(runner, {}) or "RunnerRunning" in state["runners"].get(runner, {}):
            out[iid] = node_id
    return out


def serving_task(node) -> str | None:
    """The instance of the one running task, once the leader has it."""
    state = state_of(node) or {"tasks": {}}
    running = [t["TextGeneration"]["instanceId"] for t in state["tasks"].values()
               if t["TextGeneration"]["taskStatus"] in ("Pending", "Running")]
    return running[0] if len(running) == 1 else None


def ask(stream: bool) -> dict[str, Any]:
    extra: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    return {**bc.body(PROMPT, TOKENS), "model": REAL, **extra}


def test_a_stream_whose_node_is_killed_mid_answer_goes_on_elsewhere_as_if_nothing_happened(nodes, real_model):
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    config = {**FAST, **MLX}
    a = nodes("a", config=config, args=node_args(namespace, []), models={REAL_DIR: real_model})
    b = nodes("b", config=config, args=node_args(namespace, [a]), models={REAL_DIR: real_model})
    c = nodes("c", config=config, args=node_args(namespace, [a]), models={REAL_DIR: real_model})
    wait_until(a, lambda: converged([a, b, c], 3), 60, "formation")
    by_id = {http_json(f"{n.url}/node_id")[1]: n for n in (a, b, c)}
    a_id = next(i for i, n in by_id.items() if n is a)
    for want_ready in (1, 2):  # one instance on b, one on c (the API node a serves none)
        taken = [a_id, *ready_instances(a).values()]
        status, placed = http_json(f"{a.url}/place_instance", {"model_id": REAL, "excluded_nodes": taken})
        assert status == 200, placed
        wait_until(a, lambda n=want_ready: len(ready_instances(a)) == n, 180, "an instance ready")
    status, undisturbed = bc.complete(a.url, ask(stream=False))
    assert status == 200, undisturbed
    want = undisturbed["choices"][0]["message"]["content"]
    assert undisturbed["usage"]["completion_tokens"] == TOKENS, undisturbed["usage"]  # no early stop

    conn = http.client.HTTPConnection("127.0.0.1", a.api_port, timeout=120)
    conn.request("POST", "/v1/chat/completions", json.dumps(ask(stream=True)), {"Content-Type": "application/json"})
    text, errors, usage, killed = "", [], None, None
    for kind, payload in sse_events(conn.getresponse()):
        if kind != "data" or payload == "[DONE]":
            continue
        if "error" in payload:
            errors.append(payload["error"])
            continue
        if payload.get("usage"):
            usage = payload["usage"]
        for choice in payload.get("choices", []):
            text += choice["delta"].get("content") or ""
        if killed is None and len(text) > len(want) // 4:
            iid = wait_until(a, lambda: serving_task(a), 30, "the running task")
            killed = by_id[ready_instances(a)[iid]]
            os.killpg(killed.pid, signal.SIGKILL)  # the node serving this stream, mid-answer
    assert killed is not None and not errors, errors
    assert text == want, (text, want)
    counts = ("prompt_tokens", "completion_tokens", "total_tokens")  # (a prefix cache may differ)
    assert usage is not None and {k: usage[k] for k in counts} == {k: undisturbed["usage"][k] for k in counts}, usage
    assert usage["prompt_tokens_details"]["cached_tokens"] <= usage["prompt_tokens"], usage
    print(f"killed the serving node after {len(want) // 4}+ characters; the answer went on elsewhere: {text!r}")


SHAPE_TOKENS = 300
SCHEMA_TOKENS = 200
SCHEMA = {"type": "object", "properties": {"title": {"type": "string"}, "sea": {"type": "string"}},
          "required": ["title", "sea"], "additionalProperties": False}


def test_every_client_shape_goes_on_after_its_runner_is_killed_mid_answer(nodes, demo_model):
    """The demo model, two instances on one node: each client shape's greedy stream has the
    runner serving it SIGKILLed at its first text; the answer goes on on the other instance
    (or the re-created one) and equals mlx-lm's own, with no error. A JSON-schema stream too:
    the new runner's grammar is advanced through the tokens already sent, and the answer is the
    undisturbed constrained one."""
    out = subprocess.run([sys.executable, "-m", "tests.integration.reference_generate", str(demo_model),
                          str(SHAPE_TOKENS), json.dumps([SHAPE_PROMPT])], capture_output=True, text=True,
                         timeout=patience(100), check=True)
    (ref,) = json.loads(out.stdout)
    # Each step 10 ms longer: a 300-token answer takes 3 s, so the kill at the first text lands
    # mid-answer however late a busy machine lets the client see that text and find the runner.
    node = nodes(args=("--place", MODEL), models={DEMO_DIR: demo_model}, env={"SKULK_FAULTS": "runner@step=pace:0.01"})
    wait_model_ready(node)
    assert http_json(f"{node.url}/place_instance", {"model_id": MODEL})[0] == 200
    wait_until(node, lambda: len(ready_instances(node)) == 2, 60, "two instances ready")
    user = [{"role": "user", "content": SHAPE_PROMPT}]
    oa = openai.OpenAI(base_url=f"{node.url}/v1", api_key="none", max_retries=0, timeout=120)
    constrained: dict[str, Any] = {"model": MODEL, "messages": user, "max_tokens": SCHEMA_TOKENS, "temperature": 0,
                                   "response_format": {"type": "json_schema",
                                                       "json_schema": {"name": "story", "schema": SCHEMA}}}
    whole = oa.chat.completions.create(**constrained).choices[0].message.content  # undisturbed
    assert whole and whole.startswith("{"), whole
    an = anthropic.Anthropic(base_url=node.url, api_key="none", max_retries=0, timeout=120)
    shapes = {
        "openai responses": lambda: (e.delta for e in oa.responses.create(
            model=MODEL, input=user, max_output_tokens=SHAPE_TOKENS, temperature=0, stream=True)
            if e.type == "response.output_text.delta"),
        "anthropic messages": lambda: (e.delta.text for e in an.messages.create(
            model=MODEL, max_tokens=SHAPE_TOKENS, extra_body={"temperature": 0}, messages=user, stream=True)
            if e.type == "content_block_delta"),
        "ollama chat": lambda: (p.message.content for p in ollama.Client(host=node.url, timeout=120).chat(
            model=MODEL, messages=user, stream=True, options={"temperature": 0, "num_predict": SHAPE_TOKENS})),
        # the grammar goes on from the tokens already sent: the same constrained answer
        "openai chat, JSON schema": lambda: (c.choices[0].delta.content or "" for c in oa.chat.completions.create(
            **constrained, stream=True) if c.choices),
    }
    for shape, stream in shapes.items():
        went_on = _went_on(node)
        text = ""
        for piece in stream():
            if not text and piece:
                iid = wait_until(node, lambda: serving_task(node), 30, "the running task")
                runner = _runner_of(node, iid)
                os.kill(node.status()[runner].pid, signal.SIGKILL)  # its runner, mid-answer
            text += piece
        assert text == (whole if "schema" in shape else ref["text"]), shape
        assert _went_on(node) > went_on, f"{shape}: the kill did not land mid-answer"
        print(f"{shape}: its runner killed at the first text; the answer went on, the same")


def _went_on(node) -> int:
    """How many times this node's API has gone on with a request elsewhere (its log says so)."""
    return node.log_path.read_text(errors="replace").count("going on elsewhere")


def _runner_of(node, instance_id: str) -> str:
    inst = (state_of(node) or {})["instances"][instance_id]
    (runner,) = inst["MlxRingInstance"]["shardAssignments"]["nodeToRunner"].values()
    return runner
