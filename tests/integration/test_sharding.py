"""Placement across 2 real nodes and sharded instances on mx.distributed's ring backend."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from tests.integration import batch_clients as bc
from tests.integration.cluster import FAST, converged, node_args, place_and_wait, state_of
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import wait_until
from tests.integration.patience import patience
from tests.integration.serving import MODEL, http_json, sse_events

PROMPTS = ["Beautiful is better than ugly.", "Flat is better than nested, said the"]


@pytest.fixture(autouse=True)
def nothing_left_placed(request):
    """The file's nodes are shared: whatever a test placed is deleted after it, pass or fail."""
    yield
    if "pair" in request.fixturenames:
        a, _b = request.getfixturevalue("pair")
        for iid in list((state_of(a) or {}).get("instances", {})):
            http_json(f"{a.url}/instance/{iid}", method="DELETE")


Q4 = "skulk/demo-tiny-4bit"


@pytest.fixture(scope="module")
def demo_q4(demo_model, tmp_path_factory):
    """The demo model quantized to 4 bits by mlx-lm's own converter (in a subprocess)."""
    out = tmp_path_factory.mktemp("q4") / "skulk--demo-tiny-4bit"
    code = ("import sys; from mlx_lm import convert; "
            "convert(sys.argv[1], mlx_path=sys.argv[2], quantize=True, q_bits=4, q_group_size=32)")
    subprocess.run([sys.executable, "-c", code, str(demo_model), str(out)], check=True, capture_output=True,
                   timeout=patience(100))
    return out


@pytest.fixture(scope="module")
def pair(module_nodes, demo_model, demo_q4, tmp_path_factory):
    """Two nodes with the demo model, plus two test-only model dirs for refusals: one whose
    family mlx-lm cannot tensor-shard, one whose weights (a sparse file) are far too big.
    Shared by the file's tests: each deletes the instances it placed."""
    nodes, tmp_path = module_nodes, tmp_path_factory.mktemp("sharding-models")
    extra = {DEMO_DIR: demo_model, demo_q4.name: demo_q4}
    notensor = tmp_path / "shared" / "test--notensor"
    huge = tmp_path / "shared" / "test--huge"
    for d in (notensor, huge):
        d.mkdir(parents=True)
        config = json.loads((demo_model / "config.json").read_text())
        if d is notensor:
            config["model_type"] = "gpt_bigcode"
        (d / "config.json").write_text(json.dumps(config))
    os.symlink(demo_model / "model.safetensors", notensor / "model.safetensors")
    with open(huge / "model.safetensors", "wb") as f:
        f.truncate(4 * 1024 ** 4)  # 4 TiB, sparse: no disk is used
    extra.update({"test--notensor": notensor, "test--huge": huge})
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    a = nodes("a", config=FAST, args=node_args(namespace, []), models=extra)
    b = nodes("b", config=FAST, args=node_args(namespace, [a]), models=extra)
    wait_until(a, lambda: converged([a, b], 2), 30, "formation")
    return a, b


def greedy(node, prompt: str, n: int = 16):
    status, body = http_json(f"{node.url}/v1/chat/completions", {
        "model": MODEL, "max_tokens": n, "temperature": 0, "logprobs": True,
        "messages": [{"role": "user", "content": prompt}]})
    assert status == 200, body
    return [(tuple(c["bytes"]), round(c["logprob"], 3)) for c in body["choices"][0]["logprobs"]["content"]]


def test_pipeline_and_tensor_across_two_nodes_match_one_node(pair):
    """Each sharded instance serves 8 concurrent requests (one batch, in lock-step across the
    ranks) with the tokens one node gives each request alone."""
    a, b = pair
    iid, took, _ = place_and_wait(b, [a, b], {"model_id": MODEL})
    print(f"place -> ready, 1 node: {took:.2f}s")
    single = {p: greedy(a, p) for p in PROMPTS}
    batch = [bc.body(bc.prompt(i), 16) for i in range(8)]
    single_batch = [bc.tokens_of(bc.complete(a.url, p)[1]) for p in batch]
    assert http_json(f"{a.url}/instance/{iid}", method="DELETE")[0] == 200
    for sharding in ("Pipeline", "Tensor"):
        iid, took, inst = place_and_wait(a, [a, b], {"model_id": MODEL, "sharding": sharding, "min_nodes": 2})
        ring = inst["MlxRingInstance"]
        shards = [next(iter(s.values())) for s in ring["shardAssignments"]["runnerToShard"].values()]
        assert sorted(s["deviceRank"] for s in shards) == [0, 1] and {s["worldSize"] for s in shards} == {2}
        assert len(ring["shardAssignments"]["nodeToRunner"]) == 2
        metadata = {k for s in ring["shardAssignments"]["runnerToShard"].values() for k in s}
        assert metadata == {f"{sharding}ShardMetadata"}
        if sharding == "Pipeline":
            layers = sorted((s["startLayer"], s["endLayer"]) for s in shards)
            assert layers[0][0] == 0 and layers[-1][1] == 4 and layers[0][1] == layers[1][0]
        print(f"place -> ready, 2 nodes {sharding}: {took:.2f}s")
        for p in PROMPTS:
            got = greedy(b, p)
            assert [t for t, _ in got] == [t for t, _ in single[p]], (sharding, p)
            assert [lp for _, lp in got] == pytest.approx([lp for _, lp in single[p]], abs=2e-3)
        together = bc.all_at_once(b.url, batch)
        for i, (status, reply) in enumerate(together):
            assert status == 200, reply
            assert bc.compare(single_batch[i], bc.tokens_of(reply), 2e-3) == "", (sharding, i)
        gap = max(bc.max_logprob_gap(x, bc.tokens_of(r)) for x, (_, r) in zip(single_batch, together))
        print(f"{sharding} x2: 8 concurrent requests, tokens identical to one node's, "
              f"largest logprob difference {gap:.2e}")
        assert http_json(f"{a.url}/instance/{iid}", method="DELETE")[0] == 200


def test_a_quantized_model_split_over_two_nodes_answers_as_one_node(pair, demo_q4):
    """Each rank of a 4-bit model runs its part in fp32 on the CPU, as one node does the whole:
    read from the fp32 copy the single-node runner kept (Pipeline), or dequantized by the rank
    itself where there is none (Tensor, the copy removed first)."""
    from skulk.services.runner.fp32_cache import CACHE_DIR

    a, b = pair

    def answers(via) -> list:
        return [bc.tokens_of(bc.complete(via.url, {**bc.body(p, 12), "model": Q4})[1]) for p in PROMPTS]

    iid, _, _ = place_and_wait(b, [a, b], {"model_id": Q4})
    single = answers(a)
    assert http_json(f"{a.url}/instance/{iid}", method="DELETE")[0] == 200
    for sharding, how in (("Pipeline", "(dequantized, kept copy)"), ("Tensor", "(dequantized)")):
        if sharding == "Tensor":
            shutil.rmtree(demo_q4 / CACHE_DIR)
        iid, took, _ = place_and_wait(a, [a, b], {"model_id": Q4, "sharding": sharding, "min_nodes": 2})
        got = answers(b)
        for want, have in zip(single, got):
            assert bc.compare(want, have, 2e-3) == "", (sharding, bc.compare(want, have, 2e-3))
        print(f"4-bit {sharding} x2 ready in {took:.2f}s: tokens identical to one node's")
        ranks = [ln for n in (a, b) for f in (n.home / "logs").glob("runner-*.log")
                 for ln in f.read_text().splitlines()
                 if f"loaded {Q4} " in ln and f"engine path: {sharding} rank" in ln]
        assert ranks and all(f"cpu fp32 {how}" in ln for ln in ranks), ranks
        assert http_json(f"{a.url}/instance/{iid}", method="DELETE")[0] == 200


def test_typed_refusals_from_real_requests(pair):
    a, b = pair
    _, b_id = http_json(f"{b.url}/node_id")
    _, a_id = http_json(f"{a.url}/node_id")
    cases = [
        ({"model_id": MODEL, "min_nodes": 3},
         "The topology has only 2 node(s); a placement with min_nodes=3 is impossible"),
        ({"model_id": MODEL, "excluded_nodes": [a_id, b_id]}, "touch an excluded node (2 node(s) excluded)"),
        ({"model_id": "test/notensor", "sharding": "Tensor"}, "does not support tensor parallelism: test/notensor"),
        ({"model_id": "test/huge"}, "No candidate cycle fits test/huge (4096.0GB of weights)"),
        ({"model_id": MODEL, "instance_meta": "MlxJaccl"}, "RDMA"),
    ]
    for body, needle in cases:
        status, reply = http_json(f"{a.url}/place_instance", body)
        assert status == 400, (body, reply)
        assert needle in reply["error"]["message"] and reply["error"]["type"] == "Bad Request"
    status, reply = http_json(f"{a.url}/place_instance", {"model_id": "test/huge"})
    assert "node " in reply["error"]["message"] and "GB" in reply["error"]["message"]
    assert http_json(f"{a.url}/place_instance", {"model_id": "nobody/nothing"})[0] == 404
    previews = http_json(f"{a.url}/instance/previews?model_id={MODEL}")[1]["previews"]
    valid = {(p["sharding"], len(p["memory_delta_by_node"] or {})) for p in previews if not p["error"]}
    assert ("Pipeline", 1) in valid and ("Pipeline", 2) in valid and ("Tensor", 2) in valid
    assert any(p["error"] and "RDMA" in p["error"] for p in previews)


def test_exclusions_keep_the_instance_off_the_excluded_node(pair):
    a, b = pair
    _, a_id = http_json(f"{a.url}/node_id")
    for _ in range(2):
        status, reply = http_json(f"{b.url}/place_instance", {"model_id": MODEL, "excluded_nodes": [a_id, "old-id"]})
        assert status == 200
        try:
            inst = wait_until(a, lambda iid=reply["instance_id"]: (state_of(a) or {}).get("instances", {}).get(iid),
                              30, "placed")
            assert a_id not in inst["MlxRingInstance"]["shardAssignments"]["nodeToRunner"]
        finally:
            assert http_json(f"{a.url}/instance/{reply['instance_id']}", method="DELETE")[0] == 200


def test_deleting_an_instance_mid_stream_ends_the_stream_within_a_second(pair):
    a, b = pair
    iid, _, _ = place_and_wait(a, [a, b], {"model_id": MODEL, "min_nodes": 2})
    conn = http.client.HTTPConnection("127.0.0.1", b.api_port, timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": MODEL, "max_tokens": 1900, "stream": True, "temperature": 0,  # greedy: no early EOS
        "messages": [{"role": "user", "content": PROMPTS[0]}]}), {"Content-Type": "application/json"})
    deleted_at = None
    for kind, payload in sse_events(conn.getresponse()):
        if deleted_at is None and kind == "data" and "choices" in payload:
            assert http_json(f"{a.url}/instance/{iid}", method="DELETE")[0] == 200
            deleted_at = time.monotonic()
        if kind == "data" and isinstance(payload, dict) and "error" in payload:
            took = time.monotonic() - deleted_at
            break
    else:
        pytest.fail("stream ended without the error event")
    print(f"instance deleted mid-stream: client got the error event {took:.3f}s later")
    assert "instance was deleted" in payload["error"]["message"]


def test_a_placement_during_formation_is_success_or_info_pending_never_a_false_400(nodes, demo_model):
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    a = nodes("a", config=FAST, args=node_args(namespace, []), models={DEMO_DIR: demo_model})
    b = nodes("b", config=FAST, args=node_args(namespace, [a]), models={DEMO_DIR: demo_model},
              ready=False)
    b.wait_ready(timeout=30)  # b's roles are up; it may not have met a yet
    t0 = time.monotonic()
    status, reply = http_json(f"{b.url}/place_instance", {"model_id": MODEL, "min_nodes": 2}, timeout=60)
    print(f"placement sent during formation: {status} after {time.monotonic() - t0:.2f}s")
    assert status in (200, 503), reply
    if status == 503:
        assert "retry" in reply["error"]["message"]
        return
    # Accepted: whichever lone leader wins when they meet, the placement survives formation.
    wait_until(a, lambda: converged([a, b], 2), 30, "formation")
    wait_until(a, lambda: any(next(iter(i.values()))["shardAssignments"]["modelId"] == MODEL
                              for i in (state_of(a) or {"instances": {}})["instances"].values()),
               30, "the placement kept")
