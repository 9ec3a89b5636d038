"""Tracing on real nodes: the switch is replicated state for new requests only; a traced
request leaves the API's, the router's and every rank's spans under its task id."""

from __future__ import annotations

import json
import urllib.request
import uuid

import pytest

from tests.integration.cluster import FAST, converged, node_args, place_and_wait
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import wait_until
from tests.integration.serving import MODEL, http_json, wait_model_ready


@pytest.fixture
def serving(nodes, demo_model):
    node = nodes(args=("--place", MODEL), models={DEMO_DIR: demo_model})
    wait_model_ready(node)
    return node


def chat(node, text: str) -> dict:
    status, body = http_json(f"{node.url}/v1/chat/completions", {
        "model": MODEL, "max_tokens": 6, "messages": [{"role": "user", "content": text}]})
    assert status == 200, body
    return body


def parts(node) -> dict[str, dict[str, dict]]:
    """task id -> part name -> the part, from the node's traces directory."""
    root = node.home / "traces"
    found: dict[str, dict[str, dict]] = {}
    for folder in sorted(root.iterdir()) if root.exists() else []:
        found[folder.name] = {f.stem: json.loads(f.read_text()) for f in folder.glob("*.json")}
    return found


def test_switch_and_one_traced_request_on_one_node(serving):
    assert http_json(f"{serving.url}/v1/tracing")[1] == {"enabled": False}
    chat(serving, "not traced")
    assert parts(serving) == {}
    assert http_json(f"{serving.url}/v1/tracing", {"enabled": "yes"}, method="PUT")[0] == 422
    status, body = http_json(f"{serving.url}/v1/tracing", {"enabled": True}, method="PUT")
    assert status == 200 and body == {"enabled": True}
    assert http_json(f"{serving.url}/state")[1]["tracingEnabled"] is True

    chat(serving, "traced")
    traced = wait_until(serving, lambda: (p := parts(serving)) and all(
        {"api", "router", "rank0"} <= set(v) for v in p.values()) and p, 10, "the trace parts")
    assert len(traced) == 1
    (task_id, by_part), = traced.items()
    tasks = http_json(f"{serving.url}/state")[1]["tasks"]
    assert all(t["TextGeneration"]["traceEnabled"] for t in tasks.values())
    api = [s["name"] for s in by_part["api"]["spans"]]
    assert api == ["route", "admission", "wait first token", "stream"]
    assert [s["name"] for s in by_part["router"]["spans"]] == ["route"]
    rank0 = by_part["rank0"]["spans"]
    cats = {s["category"] for s in rank0}
    assert {"queue", "prefill", "decode", "detokenize", "network"} <= cats
    assert sum(s["category"] == "decode" for s in rank0) >= 5  # one per decode step of 6 tokens
    assert all(s["rank"] == 0 and s["durationUs"] >= 0 for s in rank0)
    assert by_part["api"]["taskId"] == task_id and by_part["api"]["modelId"] == MODEL

    assert http_json(f"{serving.url}/v1/tracing", {"enabled": False}, method="PUT")[1] == {"enabled": False}
    chat(serving, "not traced again")
    assert set(parts(serving)) == {task_id}


def test_the_configured_switch_is_a_new_clusters_first_state(nodes):
    node = nodes(env={"SKULK_TRACING_ENABLED": "1"})
    assert wait_until(node, lambda: http_json(f"{node.url}/v1/tracing")[1] == {"enabled": True}, 10,
                      "tracing on from the environment")


def test_a_pipeline_request_traced_end_to_end_read_on_a_third_node(nodes, demo_model):
    """The acceptance: tracing on through A's API, a request served by a Pipeline x2 instance on
    A and B; C, which serves none of it (it holds at most the router's span, if it leads), lists
    the trace once with both ranks' spans."""
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    models = {DEMO_DIR: demo_model}
    a = nodes("a", config=FAST, args=node_args(namespace, []), models=models)
    b = nodes("b", config=FAST, args=node_args(namespace, [a]), models=models)
    c = nodes("c", config=FAST, args=node_args(namespace, [a]))
    wait_until(a, lambda: converged([a, b, c], 3), 30, "formation")
    c_id = http_json(f"{c.url}/node_id")[1]
    place_and_wait(a, [a], {"model_id": MODEL, "sharding": "Pipeline", "min_nodes": 2, "excluded_nodes": [c_id]})

    assert http_json(f"{a.url}/v1/tracing", {"enabled": True}, method="PUT")[1] == {"enabled": True}
    assert wait_until(c, lambda: http_json(f"{c.url}/v1/tracing")[1]["enabled"], 10, "C sees the switch")
    chat(a, "traced across two nodes")

    def listed():
        status, body = http_json(f"{c.url}/v1/traces/cluster")
        traces = body["traces"] if status == 200 else []
        if len(traces) != 1 or len(traces[0]["sourceNodes"]) < 2:  # each rank's node writes its part when done
            return None
        trace = http_json(f"{c.url}/v1/traces/cluster/{traces[0]['taskId']}")[1]
        return (traces, trace) if {0, 1} <= {s["rank"] for s in trace["traces"]} else None
    traces, trace = wait_until(c, listed, 20, "the trace with both ranks, listed on C")
    task_id = traces[0]["taskId"]
    assert len(traces[0]["sourceNodes"]) >= 2 and traces[0]["modelId"] == MODEL  # + the master's node
    spans = trace["traces"]
    by_rank = {r: {s["category"] for s in spans if s["rank"] == r} for r in (-1, 0, 1)}
    assert {"api", "router"} <= by_rank[-1] and {"queue", "decode"} <= by_rank[0] and "decode" in by_rank[1]
    assert {s["nodeId"] for s in spans if s["rank"] == 1} != {s["nodeId"] for s in spans if s["rank"] == 0}

    status, stats = http_json(f"{c.url}/v1/traces/cluster/{task_id}/stats")
    assert status == 200
    assert sum(v["count"] for v in stats["byCategory"].values()) == len(spans)
    assert sum(v["totalUs"] for v in stats["byCategory"].values()) == sum(s["durationUs"] for s in spans)
    with urllib.request.urlopen(f"{c.url}/v1/traces/cluster/{task_id}/raw", timeout=30) as resp:
        raw = json.loads(resp.read())
    assert sum(e["ph"] == "X" for e in raw["traceEvents"]) == len(spans)

    assert http_json(f"{a.url}/v1/tracing", {"enabled": False}, method="PUT")[1] == {"enabled": False}
    before = {n.home.name: sorted(p.name for p in (n.home / "traces").glob("*")) if (n.home / "traces").exists()
              else [] for n in (a, b, c)}
    chat(a, "not traced any more")
    after = {n.home.name: sorted(p.name for p in (n.home / "traces").glob("*")) if (n.home / "traces").exists()
             else [] for n in (a, b, c)}
    assert after == before and before[a.home.name] == before[b.home.name] == [task_id]
