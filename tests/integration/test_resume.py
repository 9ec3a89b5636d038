"""A stream outlives its instance: the real model on two nodes of three (MLX: its prefill and
decode are bit-identical on the CPU, so a resumed greedy answer can be compared exactly), a
greedy stream through the third node's API, the node serving it SIGKILLed mid-answer. The
client gets one stream with no error whose text is the undisturbed answer, token for token,
and whose usage counts the prompt once and every token once."""

from __future__ import annotations

import http.client
import json
import os
import signal
import uuid
from typing import Any

from tests.integration import batch_clients as bc
from tests.integration.cluster import FAST, converged, node_args, state_of
from tests.integration.harness import wait_until
from tests.integration.real_model import REAL, REAL_DIR
from tests.integration.serving import http_json, sse_events

MLX = {"runner": {"engine": "mlx"}}
PROMPT = "Write a short story about a fox who finds a lantern in the forest."
TOKENS = 48


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
    assert usage == undisturbed["usage"], (usage, undisturbed["usage"])
    print(f"killed the serving node after {len(want) // 4}+ characters; the answer went on elsewhere: {text!r}")
