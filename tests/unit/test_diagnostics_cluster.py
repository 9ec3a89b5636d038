"""The cluster-wide diagnostics (pure): the merge of every node's document, the cross-rank
timeline, and `/admin/clusters`' pools and phases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skulk.cluster.state import State
from skulk.services.api.admin.clusters import CLUSTERS, cluster_view, display_phase, pool_phase
from skulk.services.api.links.peers import Peer, PeerAnswer
from skulk.services.api.observe import diagnostics_host as host
from skulk.services.api.observe.diagnostics_cluster import (
    CLUSTER,
    TIMELINE,
    NodeAnswer,
    cluster_json,
    node_answers,
    timeline_json,
)
from skulk.services.api.observe.diagnostics_node import NodeFacts, node_diagnostics
from skulk.services.api.observe.health import REPORT_STALE_S
from skulk.services.api.observe.runner_view import RING, RunnerView
from tests.unit.diagnostics_builders import GIB, T0, entry, pipeline_state, report, validate

# ---- the cluster views --------------------------------------------------------------------------

def node_doc(nid: str, state: State, view: RunnerView, now: float) -> dict[str, Any]:
    return node_diagnostics(NodeFacts(nid, "0.1", "lab", Path("/nonexistent")), state, view.runners(),
                            lambda pid: True, host.resources(Path("/"), None), [], now, RING)


def two_nodes() -> tuple[State, dict[str, Any], dict[str, Any]]:
    state = pipeline_state(("RunnerRunning", "RunnerRunning"))
    one, two = RunnerView(), RunnerView()
    one.on_message(report("r0", active=1, tok_s=20.0, phase="decode_barrier"), T0 + 9)
    one.on_message(entry("r0", 0, T0 + 1, "prefill_pipeline", node="n1"), T0)
    one.on_message(entry("r0", 1, T0 + 3, "decode_barrier", node="n1", since=T0 + 3), T0)
    two.on_message(report("r1", active=1, tok_s=20.0), T0 + 1)
    two.on_message(entry("r1", 0, T0 + 1, "prefill_pipeline", rank=1, node="n2"), T0)
    two.on_message(entry("r1", 1, T0 + 2, "decode_stream", rank=1, node="n2", since=T0 + 2), T0)
    return state, node_doc("n1", state, one, T0 + 10), node_doc("n2", state, two, T0 + 10)


def answer(nid: str, status: int = 200, body: Any = None, error: str = "") -> PeerAnswer:
    return PeerAnswer(Peer(nid, f"http://{nid}:1"), status, body, error)


def test_the_timeline_merges_every_rank_in_time_order_and_lists_the_unreachable():
    state, local, peer = two_nodes()
    garbage = answer("n4", 200, ["not", "diagnostics"])
    broken = answer("n5", 200, {"supervisorRunners": [{"runnerId": "x"}]})  # no modelId, ...
    bad_time = {**peer, "supervisorRunners": [{**peer["supervisorRunners"][0],
                                               "flightRecorder": [{"at": "yesterday", "phase": "idle",
                                                                   "event": "enter"}]}]}
    nodes = node_answers(NodeAnswer("n1", None, local),
                         [answer("n2", 200, peer), answer("n3", 0, None, "ConnectionRefusedError: refused"),
                          garbage, broken, answer("n6", 200, bad_time),
                          answer("n7", 0, None, "no answer within 2 s")], {"n3": T0 - 20}, T0)
    doc = timeline_json("n1", "n1", nodes, T0 + 10)
    validate(TIMELINE, doc)
    assert [(r["nodeId"], r["deviceRank"]) for r in doc["runners"]] == [("n1", 0), ("n2", 1)]
    assert [(e["nodeId"], e["phase"]) for e in doc["timeline"]] == [
        ("n1", "prefill_pipeline"), ("n2", "prefill_pipeline"), ("n2", "decode_stream"), ("n1", "decode_barrier")]
    errors = {u["nodeId"]: u["error"] for u in doc["unreachableNodes"]}
    assert set(errors) == {"n3", "n4", "n5", "n6", "n7"}
    assert "refused" in errors["n3"] and "left the cluster 20 s ago" in errors["n3"]
    assert "not a JSON object" in errors["n4"] and "malformed" in errors["n5"] and "malformed" in errors["n6"]
    r0 = doc["runners"][0]
    assert r0["phase"] == "decode_barrier" and r0["secondsInPhase"] == 7.0 and r0["statusKind"] == "RunnerRunning"


def test_the_cluster_document_keeps_each_nodes_answer():
    state, local, peer = two_nodes()
    nodes = node_answers(NodeAnswer("n1", "http://n1:1", local),
                         [answer("n2", 200, peer), answer("n3", 500, {"error": {}}, "HTTP 500")], {}, T0)
    doc = cluster_json("n1", "n1", nodes, T0)
    validate(CLUSTER, doc)
    assert [(n["nodeId"], n["ok"]) for n in doc["nodes"]] == [("n1", True), ("n2", True), ("n3", False)]
    assert doc["unreachableNodes"] == [{"nodeId": "n3", "url": "http://n3:1", "error": "HTTP 500"}]


# ---- /admin/clusters ----------------------------------------------------------------------------

@pytest.mark.parametrize("kind,phase,active,shown", [
    ("RunnerFailed", "decode_stream", 1, "failed"), ("RunnerLoading", None, None, "loading"),
    ("RunnerWarmingUp", "warmup", 0, "loading"), ("RunnerShuttingDown", "shutdown_cleanup", 0, "loading"),
    ("RunnerReady", "idle", 0, "idle"), ("RunnerRunning", "prefill_stream", 1, "prefill"),
    ("RunnerRunning", "task_submission", 1, "prefill"), ("RunnerRunning", "decode_wait_first_token", 1, "decode"),
    ("RunnerRunning", "decode_stream", 1, "streaming"), ("RunnerRunning", "completion", 2, "streaming"),
    ("RunnerReady", "completion", 0, "idle"), ("RunnerReady", None, None, None), (None, "idle", 0, None)])
def test_display_phase(kind, phase, active, shown):
    assert display_phase(kind, phase, active) == shown


def test_pool_phase_is_the_worst_then_the_busiest():
    assert pool_phase(["idle", "failed", "loading"]) == "failed" and pool_phase(["loading", "idle"]) == "loading"
    assert pool_phase(["prefill", "streaming"]) == "streaming" and pool_phase([None, "idle"]) == "idle"
    assert pool_phase([None]) is None


def test_the_cluster_view_shows_pools_with_live_ranks_and_nulls_for_an_unreachable_node():
    state, local, peer = two_nodes()
    view = cluster_view("lab", "n1", state, node_answers(NodeAnswer("n1", None, local), [answer("n2", 200, peer)],
                                                         {}, T0), T0 + 10)
    validate(CLUSTERS, {"clusters": [view]})
    pool = view["pools"][0]
    assert view["serving"] and pool["serving"] and pool["sharding"] == "Pipeline" and pool["worldSize"] == 2
    assert pool["phase"] == "streaming" and pool["tokensPerSecond"] == 20.0 and pool["activeRequests"] == 1
    assert [(r["deviceRank"], r["phase"]) for r in pool["ranks"]] == [(0, "decode"), (1, "streaming")]
    assert [(n["nodeId"], n["status"], n["health"]) for n in view["nodes"]] == [("n1", "busy", "ok"),
                                                                                ("n2", "busy", "ok")]
    assert view["nodes"][0]["ramTotal"] == 16 * GIB and view["unreachableNodes"] == []

    cut = cluster_view("lab", "n1", state, node_answers(NodeAnswer("n1", None, local),
                                                        [answer("n2", 0, None, "timed out")], {}, T0), T0 + 10)
    validate(CLUSTERS, {"clusters": [cut]})
    rank1 = cut["pools"][0]["ranks"][1]
    assert rank1["phase"] is None and rank1["tokensPerSecond"] is None and rank1["active"] is None
    assert cut["nodes"][1]["status"] == "unreachable" and cut["nodes"][1]["health"] == "error"
    assert cut["unreachableNodes"] == [{"nodeId": "n2", "url": "http://n2:1", "error": "timed out"}]

    loading = cluster_view("lab", "n1", pipeline_state(("RunnerReady", "RunnerLoading")),
                           [NodeAnswer("n1", None, local)], T0)
    assert not loading["serving"] and loading["pools"][0]["phase"] == "loading"
    assert loading["unreachableNodes"][0]["nodeId"] == "n2"  # never asked: not listed as reachable


def test_a_stale_report_does_not_make_a_node_busy():
    state, local, peer = two_nodes()
    view = cluster_view("lab", "n1", state, [NodeAnswer("n1", None, local)], T0 + 10 + REPORT_STALE_S + 1)
    assert view["nodes"][0]["status"] == "busy"  # judged by the node's own clock (its generatedAt)
    old = node_doc("n1", state, RunnerView(), T0)
    assert cluster_view("lab", "n1", state, [NodeAnswer("n1", None, old)], T0)["nodes"][0]["status"] == "idle"
