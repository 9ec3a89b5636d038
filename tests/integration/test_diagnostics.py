"""Diagnostics, `/health` and `/admin/clusters` on real nodes: a real stream flips `/health` and
is cancelled through the diagnostics; two nodes' flight recorders merge into one timeline, and
a frozen or killed peer is listed as unreachable while the call still answers within the
peer deadline. Where a test needs runners it cannot make misbehave on cue (a second rank on a
peer), it publishes their reports and flight entries on the node's bus itself, exactly as a
runner does."""

from __future__ import annotations

import http.client
import json
import os
import signal
import time
import uuid
from typing import Any

import jsonschema
import zmq

from skulk.cluster.state import RunnerStatus
from skulk.services.api.admin.clusters import CLUSTERS
from skulk.services.api.links.peers import PEER_TIMEOUT_S
from skulk.services.api.observe.diagnostics_cluster import CLUSTER, TIMELINE
from skulk.services.api.observe.diagnostics_node import NODE_DIAGNOSTICS
from skulk.wire import endpoints
from skulk.wire.events import RunnerReport
from skulk.wire.flight import FlightEntry
from skulk.wire.sockets import make_socket, publish
from skulk.wire.topics import EVT_FLIGHT, EVT_RUNNER
from tests.integration.cluster import FAST, converged, node_args, state_of
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import Node, wait_until
from tests.integration.patience import patience
from tests.integration.serving import MODEL, http_json, sse_events, wait_model_ready


def check(schema: dict[str, Any], doc: Any) -> Any:
    jsonschema.Draft202012Validator(schema).validate(doc)
    return doc


def get(node: Node, path: str, timeout: float = 30) -> Any:
    status, body = http_json(f"{node.url}{path}", timeout=timeout)
    assert status == 200, (path, status, body)
    return body


def health(node: Node) -> str:
    return get(node, "/health")["status"]


# ---- one node, one real runner ------------------------------------------------------------------

def test_health_flips_during_a_real_stream_and_the_diagnostics_cancel_it(nodes, demo_model):
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    # decode step 40 blocks the runner for 8 s once: the stream is surely in flight meanwhile, and
    # its load report (at most every 50 ms, else every 2 s) went out before
    node = nodes(args=("--place", MODEL, "--namespace", namespace), models={DEMO_DIR: demo_model},
                 env={"SKULK_FAULTS": "runner@decode:40=slow:8"})
    runner = wait_model_ready(node)
    assert get(node, "/health") == {"status": "idle", "version": get(node, "/health")["version"]}

    conn = http.client.HTTPConnection("127.0.0.1", node.api_port, timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": MODEL, "max_tokens": 200, "stream": True, "temperature": 0,
        "messages": [{"role": "user", "content": "Tell me a long story."}]}), {"Content-Type": "application/json"})
    frames = sse_events(conn.getresponse())
    command_id = ""
    for kind, payload in frames:
        if kind == "comment" and payload.startswith("command_id "):
            command_id = payload.split(" ", 1)[1]
        if kind == "data" and "choices" in payload:
            break  # the first token is out
    t_busy = time.monotonic()
    wait_until(node, lambda: health(node) == "busy", 5, "/health busy during the stream")
    print(f"/health said busy {time.monotonic() - t_busy:.2f}s after the first token")

    def loaded() -> dict[str, Any] | None:
        doc = check(NODE_DIAGNOSTICS, get(node, "/v1/diagnostics/node"))
        runners = [r for r in doc["supervisorRunners"] if r["runnerId"] == runner and r["active"] == 1]
        return doc if runners else None

    diag = wait_until(node, loaded, 5, "the runner's report of the request in its batch")
    mine = next(r for r in diag["supervisorRunners"] if r["runnerId"] == runner)
    assert mine["processAlive"] and mine["pid"] and mine["statusKind"] in ("RunnerReady", "RunnerRunning")
    assert mine["waiting"] == 0 and mine["modelId"] == MODEL and mine["flightRecorder"]
    assert mine["phase"] in ("decode_stream", "prefill_stream", "decode_wait_first_token"), mine["phase"]
    # from its very first entry: what a runner says while its bus link is still joining is held, not lost
    assert mine["flightRecorder"][0]["event"] == "created", mine["flightRecorder"][:3]
    assert [e["phase"] for e in mine["flightRecorder"]].count("load_model") >= 1
    services = {p["service"] for p in diag["processes"]}
    assert {"supervisor", "api", "api worker", "runner", "master", "bus"} <= services
    assert next(p for p in diag["processes"] if p["pid"] == mine["pid"])["role"] == "runner"
    assert diag["runtime"]["libp2pNamespace"] == namespace

    cluster = check(CLUSTERS, get(node, "/admin/clusters"))["clusters"]
    assert len(cluster) == 1 and cluster[0]["namespace"] == namespace and cluster[0]["serving"]
    pool = cluster[0]["pools"][0]
    assert pool["serving"] and pool["modelId"] == MODEL and pool["activeRequests"] == 1
    assert pool["ranks"][0]["runnerId"] == runner and pool["phase"] in ("prefill", "decode", "streaming")
    assert cluster[0]["nodes"][0]["status"] == "busy" and cluster[0]["unreachableNodes"] == []

    task_id = next(t["TextGeneration"]["taskId"] for t in get(node, "/state")["tasks"].values()
                   if t["TextGeneration"]["commandId"] == command_id)
    path = f"/v1/diagnostics/node/runners/{runner}/cancel"
    status, body = http_json(f"{node.url}{path}", {"taskId": task_id})
    assert status == 200 and body["status"] == "cancel_requested" and body["runnerId"] == runner, body
    rest = list(frames)
    errors = [p["error"] for k, p in rest if k == "data" and isinstance(p, dict) and "error" in p]
    assert errors and errors[0]["code"] == 499 and rest[-1] == ("data", "[DONE]"), rest[-3:]
    wait_until(node, lambda: health(node) == "idle", 10, "/health idle after the stream")

    def task_ended() -> bool:  # the master has applied the cancel (TaskCancelled is told, not awaited)
        task = get(node, "/state")["tasks"].get(task_id)
        return task is None or task["TextGeneration"]["taskStatus"] in ("Cancelled", "Complete", "Failed")
    wait_until(node, task_ended, 10, "the master applying the cancel")
    status, again = http_json(f"{node.url}{path}", {"taskId": task_id})  # ended: gone, or not yet
    assert status == 404 or (status == 200 and again["status"] in ("already_cancelled", "already_completed")), again
    assert http_json(f"{node.url}/v1/diagnostics/node/runners/nope/cancel", {"taskId": task_id})[0] == 404
    assert http_json(f"{node.url}{path}", {"task": 1})[0] == 400

    timeline = check(TIMELINE, get(node, "/v1/diagnostics/cluster/timeline"))
    assert [r["runnerId"] for r in timeline["runners"]] == [runner] and timeline["unreachableNodes"] == []
    ats = [e["at"] for e in timeline["timeline"]]
    phases = [e["phase"] for e in timeline["timeline"] if e["commandId"] == command_id]
    assert ats == sorted(ats) and {"task_submission", "decode_stream", "cancel_requested", "cancel_observed"} <= set(
        phases), phases
    assert phases.index("cancel_requested") < phases.index("cancel_observed")


# ---- two nodes: the fan-out ----------------------------------------------------------------------

class Bus:
    """A PUB on a node's bus, as a runner has."""

    def __init__(self, node: Node) -> None:
        run = endpoints.run_dir(node.home.resolve())
        self.sock = make_socket(zmq.Context.instance(), zmq.PUB, connect=endpoints.bus_in(run))

    def send(self, *msgs: RunnerReport | FlightEntry) -> None:
        for m in msgs:
            publish(self.sock, EVT_RUNNER if isinstance(m, RunnerReport) else EVT_FLIGHT, m, m.runner_id)

    def close(self) -> None:
        self.sock.close(0)


def fake_runner(rid: str, node_id: str, rank: int, phases: list[tuple[float, str]], active: int = 0
                ) -> list[RunnerReport | FlightEntry]:
    """A rank of a 2-rank instance: its report and its flight entries (alive: our own pid)."""
    entries: list[RunnerReport | FlightEntry] = [
        FlightEntry(runner_id=rid, instance_id="i-fake", model_id="org/fake", node_id=node_id, rank=rank,
                    world_size=2, pid=os.getpid(), seq=k, at=at, phase=phase, event="enter", phase_since=at,
                    task_id="t-fake") for k, (at, phase) in enumerate(phases)]
    return [RunnerReport(runner_id=rid, instance_id="i-fake", status=RunnerStatus(kind="RunnerRunning"),
                         active=active, phase=phases[-1][1], pid=os.getpid(), tok_s=7.5), *entries]


def runner_ids(node: Node) -> set[str]:
    return {r["runnerId"] for r in get(node, "/v1/diagnostics/node")["supervisorRunners"]}


def timed(fn: Any) -> tuple[Any, float]:
    t0 = time.monotonic()
    out = fn()
    return out, time.monotonic() - t0


def test_the_cluster_views_merge_both_nodes_and_list_a_frozen_then_killed_peer(nodes):
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    a = nodes("a", config=FAST, args=node_args(namespace, []))
    b = nodes("b", config=FAST, args=node_args(namespace, [a]))
    wait_until(a, lambda: converged([a, b], 2), 30, "formation")
    a_id, b_id = get(a, "/node_id"), get(b, "/node_id")
    t0 = time.time() - 60  # the entries happened a while ago (too long to count as generating now)
    on_a = fake_runner("r-a", a_id, 0, [(t0 + 0.1, "prefill_pipeline"), (t0 + 0.3, "decode_barrier")])
    on_b = fake_runner("r-b", b_id, 1, [(t0, "prefill_pipeline"), (t0 + 0.2, "decode_stream")])
    bus_a, bus_b = Bus(a), Bus(b)
    try:
        # a fresh PUB's first messages may be lost (slow joiner): publish until the API has them
        wait_until(a, lambda: bus_a.send(*on_a) or bus_b.send(*on_b) or (
            "r-a" in runner_ids(a) and "r-b" in runner_ids(b)), 10, "the published runners seen")

        timeline = check(TIMELINE, get(a, "/v1/diagnostics/cluster/timeline"))
        assert [(r["nodeId"], r["runnerId"], r["deviceRank"]) for r in timeline["runners"]] == [
            (a_id, "r-a", 0), (b_id, "r-b", 1)]
        assert [(e["runnerId"], e["phase"]) for e in timeline["timeline"]] == [
            ("r-b", "prefill_pipeline"), ("r-a", "prefill_pipeline"), ("r-b", "decode_stream"),
            ("r-a", "decode_barrier")]
        assert timeline["localNodeId"] == a_id and timeline["unreachableNodes"] == []
        assert timeline["runners"][0]["secondsInPhase"] > 0 and timeline["runners"][0]["processAlive"]

        cluster = check(CLUSTER, get(a, "/v1/diagnostics/cluster"))
        assert [(n["nodeId"], n["ok"]) for n in cluster["nodes"]] == [(a_id, True), (b_id, True)]
        proxied = check(NODE_DIAGNOSTICS, get(a, f"/v1/diagnostics/cluster/{b_id}"))
        assert proxied["runtime"]["nodeId"] == b_id and [r["runnerId"] for r in proxied["supervisorRunners"]] == ["r-b"]
        assert http_json(f"{a.url}/v1/diagnostics/cluster/nobody")[0] == 404
        status, body = http_json(f"{a.url}/v1/diagnostics/cluster/{b_id}/runners/r-b/cancel", {"taskId": "t-fake"})
        assert status == 404 and "Runner not found on this node: r-b" in body["error"]["message"]  # b's own answer

        clusters = check(CLUSTERS, get(a, "/admin/clusters"))["clusters"][0]
        assert clusters["namespace"] == namespace and clusters["nodeId"] == a_id and clusters["pools"] == []
        assert [(n["nodeId"], n["status"]) for n in clusters["nodes"]] == sorted([(a_id, "idle"), (b_id, "idle")])

        # /health follows the local runners' reports: busy while one has requests in its batch
        working = fake_runner("r-a", a_id, 0, [(t0 + 0.3, "decode_barrier")], active=1)[0]
        wait_until(a, lambda: bus_a.send(working) or health(a) == "busy", 10, "/health busy")
        assert health(b) == "idle"
        assert next(n for n in get(a, "/admin/clusters")["clusters"][0]["nodes"] if n["nodeId"] == a_id)[
            "status"] == "busy"
        wait_until(a, lambda: bus_a.send(on_a[0]) or health(a) == "idle", 10, "/health idle again")
    finally:
        bus_a.close()
        bus_b.close()

    os.killpg(b.pid, signal.SIGSTOP)  # frozen: connections are accepted, nothing answers
    try:
        timeline, took = timed(lambda: get(a, "/v1/diagnostics/cluster/timeline"))
        print(f"timeline with a frozen peer answered in {took:.2f}s: {timeline['unreachableNodes']}")
        assert took < PEER_TIMEOUT_S + patience(2)
        assert [u["nodeId"] for u in timeline["unreachableNodes"]] == [b_id]
        assert [r["runnerId"] for r in timeline["runners"]] == ["r-a"]
        clusters, took = timed(lambda: get(a, "/admin/clusters")["clusters"][0])
        assert took < PEER_TIMEOUT_S + patience(2) and [u["nodeId"] for u in clusters["unreachableNodes"]] == [b_id]
        assert all(n["status"] == "unreachable" for n in clusters["nodes"] if n["nodeId"] == b_id)
    finally:
        b.kill_all()  # SIGKILL reaches stopped processes too

    wait_until(a, lambda: len((state_of(a) or {}).get("nodeIdentities", {"x": 1, "y": 2})) == 1, 20,
               "the killed node gone from the state")
    timeline, took = timed(lambda: check(TIMELINE, get(a, "/v1/diagnostics/cluster/timeline")))
    print(f"timeline with a killed peer answered in {took:.2f}s: {timeline['unreachableNodes']}")
    assert took < PEER_TIMEOUT_S + patience(2)
    gone = timeline["unreachableNodes"]
    assert [u["nodeId"] for u in gone] == [b_id] and "left the cluster" in gone[0]["error"], gone
    clusters = check(CLUSTERS, get(a, "/admin/clusters"))["clusters"][0]
    assert [n["nodeId"] for n in clusters["nodes"]] == [a_id] and clusters["unreachableNodes"][0]["nodeId"] == b_id


# ---- the acceptance scenario: a Pipeline x2 instance whose rank 1 freezes mid-request ------------

def test_a_frozen_rank_shows_in_the_timeline_and_its_killed_node_is_listed(nodes, demo_model):
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    a = nodes("a", config=FAST, args=node_args(namespace, []), models={DEMO_DIR: demo_model})
    b = nodes("b", config=FAST, args=node_args(namespace, [a]), models={DEMO_DIR: demo_model})
    wait_until(a, lambda: converged([a, b], 2), 30, "formation")
    status, reply = http_json(f"{a.url}/place_instance", {"model_id": MODEL, "sharding": "Pipeline", "min_nodes": 2})
    assert status == 200, reply

    def pool() -> dict[str, Any] | None:
        pools = get(a, "/admin/clusters")["clusters"][0]["pools"]
        return pools[0] if pools and pools[0]["serving"] else None

    ready = wait_until(a, pool, 120, "the Pipeline x2 pool serving")
    assert ready["worldSize"] == 2 and [r["deviceRank"] for r in ready["ranks"]] == [0, 1]
    assert all(r["phase"] == "idle" for r in ready["ranks"])  # each rank went loading -> idle
    by_id = {get(n, "/node_id"): n for n in (a, b)}
    near, far = by_id[ready["ranks"][0]["nodeId"]], by_id[ready["ranks"][1]["nodeId"]]
    rank1 = ready["ranks"][1]["runnerId"]

    conn = http.client.HTTPConnection("127.0.0.1", near.api_port, timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": MODEL, "max_tokens": 1900, "stream": True, "temperature": 0,  # greedy: no early EOS
        "messages": [{"role": "user", "content": "Beautiful is better than ugly."}]}),
        {"Content-Type": "application/json"})
    frames = sse_events(conn.getresponse())
    next(p for k, p in frames if k == "data" and "choices" in p)  # tokens flow
    pid = next(r["pid"] for r in get(far, "/v1/diagnostics/node")["supervisorRunners"] if r["runnerId"] == rank1)
    os.kill(pid, signal.SIGSTOP)
    try:
        def stuck() -> dict[str, Any] | None:
            doc = get(near, "/v1/diagnostics/cluster/timeline")
            ranks = {r["deviceRank"]: r for r in doc["runners"]}
            return doc if ranks.get(0, {}).get("phase") in ("decode_barrier", "prefill_barrier") else None

        first = check(TIMELINE, wait_until(near, stuck, 8, "rank 0 waiting on rank 1 in the timeline"))
        second = check(TIMELINE, wait_until(near, lambda: (d := stuck()) and d["generatedAt"] > first[
            "generatedAt"] and d, 5, "a later timeline"))
        r0, r1 = ({r["deviceRank"]: r for r in doc["runners"]} for doc in (first, second))
        last = {rank: max(e["at"] for e in second["timeline"] if e["runnerId"] == r["runnerId"])
                for rank, r in r1.items()}
        print(f"frozen rank 1: rank 0 in {r1[0]['phase']} for {r1[0]['secondsInPhase']:.1f}s, rank 1 in "
              f"{r1[1]['phase']} for {r1[1]['secondsInPhase']:.1f}s; last entries {last}")
        assert last[1] < last[0], "rank 1's last entry is not older than rank 0's"
        assert r1[1]["secondsInPhase"] > r0[1]["secondsInPhase"] and r1[1]["processAlive"]  # frozen, not dead
        waits = [e for e in second["timeline"] if e["deviceRank"] == 0 and e["event"] == "waiting_on_ranks"]
        assert waits and waits[-1]["phase"] in ("decode_barrier", "prefill_barrier")
    finally:
        far.kill_all()  # the frozen rank's whole node (SIGKILL reaches stopped processes too)
        conn.close()

    timeline, took = timed(lambda: check(TIMELINE, get(near, "/v1/diagnostics/cluster/timeline")))
    print(f"timeline with the frozen rank's node killed answered in {took:.2f}s: {timeline['unreachableNodes']}")
    assert took < PEER_TIMEOUT_S + patience(2)
    assert [u["nodeId"] for u in timeline["unreachableNodes"]] == [ready["ranks"][1]["nodeId"]]
    assert ready["ranks"][0]["runnerId"] in [r["runnerId"] for r in timeline["runners"]]  # what rank 0 recorded stays
