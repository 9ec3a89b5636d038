"""Traces across real nodes: part files left on two nodes (as a Pipeline x2 request leaves
them: API, router and rank 0 on one node, rank 1 on another) are read on a third through
`/v1/traces/cluster*`, merged by task id; delete; a frozen, then killed, peer is reported
unreachable while the call still answers within the fan-out deadline.

The part files are written straight into each node's `<home>/traces` with the writer the
processes use (`wire/trace_files.write_part`), so this tests the read side on its own."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
import uuid
from typing import Any

from skulk.node.trace_files import TracePart, now_us, write_part
from tests.integration.cluster import converged, name_of, node_args
from tests.integration.harness import Node, wait_until
from tests.integration.patience import patience
from tests.integration.serving import MODEL, http_json

SLOW_TIMEOUT = {"cluster": {"discovery_port": 0, "peer_timeout_s": 60.0}}
"""Peers stay members for a minute of silence: a frozen node stays in the state (so it is asked,
and must be reported unreachable) for the whole test."""
FANOUT_BOUND_S = 2.0 + patience(2.0)
"""A cluster view answers within the peers' deadline (2 s) plus its own work (stretched for this
machine), frozen peer or not."""


def node_id(node: Node) -> str:
    return http_json(f"{node.url}/node_id")[1]


def write_parts(node: Node, task: str, t0: int, parts: dict[str, list[tuple[str, str, int, int]]]) -> None:
    """Parts `{part name: [(span, category, start offset µs, duration µs)]}` into the node's home."""
    nid = node_id(node)
    for name, spans in parts.items():
        rank = int(name[4:]) if name.startswith("rank") else -1
        part = TracePart(task_id=task, part=name, node_id=nid, friendly_name=name_of(node), model_id=MODEL)
        for span, cat, start, dur in spans:
            part.add(span, cat, t0 + start, t0 + start + dur, rank=rank)
        assert write_part(node.home, part) is not None


def get(node: Node, path: str) -> tuple[int, Any, float]:
    t = time.monotonic()
    status, body = http_json(f"{node.url}{path}", timeout=30)
    return status, body, time.monotonic() - t


def test_cluster_traces_merge_every_nodes_parts_and_survive_a_lost_peer(nodes):
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    first = nodes("n0", config=SLOW_TIMEOUT, args=node_args(namespace, []))
    cluster = [first] + [nodes(f"n{i}", config=SLOW_TIMEOUT, args=node_args(namespace, [first])) for i in (1, 2)]
    master = wait_until(first, lambda: converged(cluster, 3), 30, "formation")["master"]
    ids = {node_id(n): n for n in cluster}
    # C asks; A and B hold the parts; B (frozen later) is never the master.
    c = ids[master]
    a, b = [n for n in cluster if n is not c]
    task, t0 = f"task-{uuid.uuid4().hex[:8]}", now_us()
    write_parts(a, task, t0, {"api": [("http", "api", 0, 9000)], "router": [("route", "router", 50, 100)],
                              "rank0": [("prefill", "prefill", 200, 3000), ("decode 0", "decode", 3200, 400),
                                        ("decode 1", "decode", 3600, 450)]})
    write_parts(b, task, t0, {"rank1": [("prefill", "prefill", 250, 2800), ("decode 0", "decode", 3250, 300),
                                        ("decode 1", "decode", 3650, 350)]})
    write_parts(a, "only-on-a", t0 - 1000, {"api": [("http", "api", 0, 10)]})
    an_hour_ago = time.time() - 3600
    os.utime(a.home / "traces" / "only-on-a" / "api.json", (an_hour_ago, an_hour_ago))  # listed after `task`
    (b.home / "traces" / task / ".rank2.abc.tmp").write_text('{"spans": [')  # a writer killed mid-write
    expected = {"api": 1, "router": 1, "prefill": 2, "decode": 4}

    # The list on the third node: the task once, with both nodes' parts.
    status, local, _ = get(c, "/v1/traces")
    assert status == 200 and local == {"traces": []}
    status, listed, took = get(c, "/v1/traces/cluster")
    assert status == 200 and listed["unreachableNodes"] == [] and took < FANOUT_BOUND_S
    assert [e["taskId"] for e in listed["traces"]] == [task, "only-on-a"]
    entry = listed["traces"][0]
    assert {n["nodeId"] for n in entry["sourceNodes"]} == {node_id(a), node_id(b)}
    assert {n["friendlyName"] for n in entry["sourceNodes"]} == {name_of(a), name_of(b)}
    assert entry["categories"] == sorted(expected) and entry["modelId"] == MODEL
    print(f"/v1/traces/cluster on the third node: {len(listed['traces'])} traces in {took * 1000:.0f} ms")

    # The detail merges both ranks' spans; stats add up; raw is a Chrome trace.
    status, trace, _ = get(c, f"/v1/traces/cluster/{task}")
    assert status == 200 and trace["taskId"] == task and trace["unreachableNodes"] == []
    spans = trace["traces"]
    assert {s["rank"] for s in spans} == {-1, 0, 1} and len(spans) == sum(expected.values())
    assert [s["startUs"] for s in spans] == sorted(s["startUs"] for s in spans)
    status, got, _ = get(c, f"/v1/traces/cluster/{task}/stats")
    assert status == 200 and got["totalWallTimeUs"] == 9000
    assert {cat: v["count"] for cat, v in got["byCategory"].items()} == expected
    assert sum(v["totalUs"] for v in got["byCategory"].values()) == sum(s["durationUs"] for s in spans)
    assert set(got["byRank"]) == {"-1", "0", "1"}
    assert sum(v["totalUs"] for r in got["byRank"].values() for v in r["byCategory"].values()) == \
        sum(v["totalUs"] for v in got["byCategory"].values())
    with urllib.request.urlopen(f"{c.url}/v1/traces/cluster/{task}/raw", timeout=30) as resp:
        assert f'filename="trace_{task}.json"' in resp.headers["Content-Disposition"]
        raw = json.loads(resp.read())
    complete = [e for e in raw["traceEvents"] if e["ph"] == "X"]
    lanes = {e["args"]["name"] for e in raw["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert len(complete) == len(spans) and all(isinstance(e["ts"], int) and e["dur"] >= 0 for e in complete)
    an, bn = name_of(a), name_of(b)
    assert lanes == {f"{an} api", f"{an} router", f"{an} rank 0", f"{bn} rank 1"}
    assert get(c, "/v1/traces/cluster/nope")[:2] == (404, {"error": {
        "message": "Trace not found: nope", "type": "Not Found", "param": None, "code": 404}})
    assert get(c, "/v1/traces/cluster/a..b/stats")[0] == 400
    # Each node's own view holds only its parts.
    assert {s["rank"] for s in get(b, f"/v1/traces/{task}")[1]["traces"]} == {1}

    # Delete on A: the cluster view now has B's part alone.
    status, done = http_json(f"{a.url}/v1/traces/delete", {"taskIds": [task, "nope"]})
    assert status == 200 and done == {"deleted": [task], "notFound": ["nope"]}
    assert get(a, f"/v1/traces/{task}")[0] == 404
    status, trace, _ = get(c, f"/v1/traces/cluster/{task}")
    assert status == 200 and {s["rank"] for s in trace["traces"]} == {1}
    assert [n["nodeId"] for n in trace["sourceNodes"]] == [node_id(b)]

    # B freezes (still a member: its API accepts connections and never answers): reported
    # unreachable, the call answers within the deadline with what the others have.
    b_id, b_name = node_id(b), name_of(b)
    os.killpg(b.pid, signal.SIGSTOP)
    try:
        status, listed, frozen_took = get(c, "/v1/traces/cluster")
        assert status == 200 and frozen_took < FANOUT_BOUND_S, frozen_took
        assert [e["taskId"] for e in listed["traces"]] == ["only-on-a"]
        (gone,) = listed["unreachableNodes"]
        assert gone["nodeId"] == b_id and gone["friendlyName"] == b_name and gone["error"]
        status, body, took = get(c, f"/v1/traces/cluster/{task}")
        assert status == 404 and took < FANOUT_BOUND_S
        status, body, _ = get(c, "/v1/traces/cluster/only-on-a")
        assert status == 200 and [u["nodeId"] for u in body["unreachableNodes"]] == [b_id]
        print(f"a frozen peer is reported unreachable; /v1/traces/cluster answered in {frozen_took * 1000:.0f} ms")
    finally:
        b.kill_all()  # SIGKILL reaches stopped processes
    # Killed: refused at once while the state still lists it, then no longer asked at all.
    status, listed, took = get(c, "/v1/traces/cluster")
    assert status == 200 and took < FANOUT_BOUND_S and [e["taskId"] for e in listed["traces"]] == ["only-on-a"]
    assert [u["nodeId"] for u in listed["unreachableNodes"]] in ([b_id], [])
