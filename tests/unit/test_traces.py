"""The tracing read side: part files -> list, merged spans, stats, Chrome format, delete; the
cluster merges; the janitor's retention over task directories; the `tracing` config keys."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import falcon.testing
import pytest

from skulk.node import config
from skulk.node.role_args import ChildArgs
from skulk.node.trace_files import TracePart, traces_root, write_part
from skulk.services.api.http.app import build_app
from skulk.services.api.http.declare import Deps
from skulk.services.api.http.routes import ROUTES
from skulk.services.api.observe.trace_reader import delete_traces, list_traces, load_trace
from skulk.services.api.observe.trace_views import (
    chrome,
    clean_span,
    clean_summary,
    merge_spans,
    merge_summaries,
    stats,
)
from skulk.services.janitor.policy import DAY_S, expired_tasks
from skulk.services.janitor.service import sweep
from tests.unit.builders import api_args

T0 = 1_700_000_000_000_000  # µs since the epoch
MODEL = "org/model"


def part(task: str, name: str, node: str, spans: list[tuple[str, str, int, int, int]],
         tags: tuple[str, ...] = ()) -> TracePart:
    """A part with spans given as (name, category, start offset µs, duration µs, rank)."""
    p = TracePart(task_id=task, part=name, node_id=node, friendly_name=f"host-{node}", model_id=MODEL)
    for span_name, cat, start, dur, rank in spans:
        p.add(span_name, cat, T0 + start, T0 + start + dur, rank=rank, tags=tags)
    return p


def pipeline_task(home_a: Path, home_b: Path, task: str = "task-1") -> None:
    """A request served by a Pipeline x2 instance: API, router and rank 0 on node A, rank 1 on B."""
    write_part(home_a, part(task, "api", "A", [("http", "api", 0, 1000, -1)]))
    write_part(home_a, part(task, "router", "A", [("route", "router", 10, 20, -1)]))
    write_part(home_a, part(task, "rank0", "A", [("prefill", "prefill", 100, 300, 0),
                                                 ("decode 0", "decode", 400, 50, 0),
                                                 ("decode 1", "decode", 450, 70, 0)]))
    write_part(home_b, part(task, "rank1", "B", [("prefill", "prefill", 120, 250, 1),
                                                 ("decode 0", "decode", 410, 40, 1)]))


def test_one_node_lists_and_loads_its_parts_of_a_task(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    pipeline_task(a, b)
    (entry,) = list_traces(traces_root(a))
    sizes = sum(f.stat().st_size for f in (traces_root(a) / "task-1").iterdir())
    assert entry["taskId"] == "task-1" and entry["fileSize"] == sizes and entry["modelId"] == MODEL
    assert entry["taskKind"] == "text" and entry["categories"] == ["api", "decode", "prefill", "router"]
    assert entry["sourceNodes"] == [{"nodeId": "A", "friendlyName": "host-A"}] and not entry["hasToolActivity"]
    trace = load_trace(traces_root(a), "task-1")
    assert trace is not None and [s["name"] for s in trace["traces"]] == ["http", "route", "prefill", "decode 0",
                                                                          "decode 1"]
    starts = [s["startUs"] for s in trace["traces"]]
    assert starts == sorted(starts) and {s["rank"] for s in trace["traces"]} == {-1, 0}
    assert trace["traces"][2] == {"name": "prefill", "startUs": T0 + 100, "durationUs": 300, "rank": 0,
                                  "category": "prefill", "nodeId": "A", "modelId": MODEL, "taskKind": "text",
                                  "tags": [], "attrs": {}}
    assert load_trace(traces_root(b), "task-1")["sourceNodes"] == [{"nodeId": "B", "friendlyName": "host-B"}]
    assert load_trace(traces_root(a), "task-2") is None


def test_the_list_is_newest_first_by_the_newest_part(tmp_path: Path):
    for task in ["old", "new", "mid"]:
        write_part(tmp_path, part(task, "api", "A", [("http", "api", 0, 5, -1)]))
        write_part(tmp_path, part(task, "rank0", "A", [("decode", "decode", 0, 5, 0)], tags=("tool_call",)))
    when = {"old": 1000.0, "new": 3000.0, "mid": 2000.0}
    for task, t in when.items():
        os.utime(traces_root(tmp_path) / task / "api.json", (t, t))
        os.utime(traces_root(tmp_path) / task / "rank0.json", (t - 500, t - 500))
    os.utime(traces_root(tmp_path) / "old" / "rank0.json", (2500.0, 2500.0))  # a late part makes it newer
    listed = list_traces(traces_root(tmp_path))
    assert [e["taskId"] for e in listed] == ["new", "old", "mid"]
    assert listed[1]["createdAt"].startswith("1970-01-01T00:41:40")  # 2500 s
    assert all(e["hasToolActivity"] and e["tags"] == ["tool_call"] for e in listed)


def test_torn_and_foreign_files_are_skipped_never_an_error(tmp_path: Path):
    root = traces_root(tmp_path)
    write_part(tmp_path, part("t1", "api", "A", [("http", "api", 0, 10, -1)]))
    (root / "t1" / "rank0.json").write_text('{"taskId": "t1", "spans": [{"name": "dec')  # kill -9 mid-write
    (root / "t1" / ".rank1.x1y2.tmp").write_text("{}")  # a writer that died before its rename
    (root / "t1" / "rank2.json").write_text(json.dumps({"spans": [{"name": "bad"}, "x", {
        "name": "ok", "category": "decode", "startUs": T0, "durationUs": 5, "rank": 2}]}))
    (root / "t1" / "rank3.json").write_bytes(b"\xff\xfe not utf-8")
    (root / "torn").mkdir()
    (root / "torn" / "api.json").write_text("[1, 2")
    (root / "..bad").mkdir()
    (root / "stray.json").write_text("{}")
    (entry,) = list_traces(root)
    assert entry["taskId"] == "t1" and entry["categories"] == ["api", "decode"]
    trace = load_trace(root, "t1")
    assert [(s["name"], s["rank"]) for s in trace["traces"]] == [("http", -1), ("ok", 2)]  # by start, then rank
    assert load_trace(root, "torn") is None


@pytest.mark.parametrize("bad", ["../t1", "..", "a/b", "/etc", "a..b", "", ".hidden", "x" * 200])
def test_traversal_ids_are_refused(tmp_path: Path, bad: str):
    write_part(tmp_path, part("t1", "api", "A", [("http", "api", 0, 10, -1)]))
    inner = traces_root(tmp_path) / "t1"
    assert load_trace(inner, "..") is None and load_trace(traces_root(tmp_path), bad) is None
    assert delete_traces(inner, [bad]) == ([], [bad])
    assert (inner / "api.json").is_file()


def test_delete_removes_whole_tasks_and_reports_the_rest(tmp_path: Path):
    root = traces_root(tmp_path)
    for task in ("t1", "t2"):
        write_part(tmp_path, part(task, "api", "A", [("http", "api", 0, 10, -1)]))
    assert delete_traces(root, ["t1", "nope", "t1", "../t2"]) == (["t1"], ["nope", "../t2"])
    assert [e["taskId"] for e in list_traces(root)] == ["t2"]


def test_stats_add_up_over_categories_and_ranks(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    pipeline_task(a, b)
    spans = merge_spans(load_trace(traces_root(a), "task-1")["traces"], load_trace(traces_root(b), "task-1")["traces"])
    got = stats("task-1", spans, [])
    assert got["totalWallTimeUs"] == 1000  # the API's span covers all
    assert got["byCategory"]["decode"] == {"totalUs": 160, "count": 3, "minUs": 40, "maxUs": 70,
                                           "avgUs": pytest.approx(160 / 3)}
    assert sum(c["totalUs"] for c in got["byCategory"].values()) == sum(s["durationUs"] for s in spans)
    assert sum(c["count"] for c in got["byCategory"].values()) == len(spans) == 7
    assert set(got["byRank"]) == {"-1", "0", "1"}
    for cat, whole in got["byCategory"].items():
        per_rank = [r["byCategory"][cat] for r in got["byRank"].values() if cat in r["byCategory"]]
        assert sum(c["totalUs"] for c in per_rank) == whole["totalUs"]
        assert sum(c["count"] for c in per_rank) == whole["count"]
    assert got["byRank"]["1"]["byCategory"]["prefill"]["totalUs"] == 250
    assert stats("x", [], [])["totalWallTimeUs"] == 0


def test_merging_nodes_keeps_each_span_once(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    pipeline_task(a, b)
    on_a, on_b = load_trace(traces_root(a), "task-1")["traces"], load_trace(traces_root(b), "task-1")["traces"]
    merged = merge_spans(on_a, on_b, on_a)  # a node answering twice, or two copies of one span
    assert len(merged) == len(on_a) + len(on_b) == 7
    assert [s["startUs"] for s in merged] == sorted(s["startUs"] for s in merged)
    assert {s["rank"] for s in merged} == {-1, 0, 1}


def test_cluster_list_merges_entries_by_task_id():
    def entry(task: str, when: str, size: int, node: str, cats: list[str]) -> dict[str, Any]:
        return clean_summary({"taskId": task, "createdAt": when, "fileSize": size, "modelId": MODEL,
                              "taskKind": "text", "categories": cats, "tags": [], "hasToolActivity": False,
                              "sourceNodes": [{"nodeId": node, "friendlyName": node.lower()}]})

    a = [entry("t1", "2024-01-01T00:00:05+00:00", 100, "A", ["api", "decode"]),
         entry("t0", "2024-01-01T00:00:01+00:00", 10, "A", ["api"])]
    b = [entry("t1", "2024-01-01T00:00:07+00:00", 60, "B", ["decode", "prefill"]),
         entry("t2", "2024-01-01T00:00:06+00:00", 5, "B", ["decode"])]
    merged = merge_summaries(a, b)
    assert [e["taskId"] for e in merged] == ["t1", "t2", "t0"]
    assert merged[0]["createdAt"] == "2024-01-01T00:00:07+00:00" and merged[0]["fileSize"] == 100
    assert merged[0]["categories"] == ["api", "decode", "prefill"]
    assert merged[0]["sourceNodes"] == [{"nodeId": "A", "friendlyName": "a"}, {"nodeId": "B", "friendlyName": "b"}]
    assert clean_summary({"taskId": "../x"}) is None and clean_summary([]) is None
    assert clean_span({"name": "x", "category": "c", "startUs": True, "durationUs": 1}) is None


def test_chrome_format_has_a_named_process_per_node_and_lane(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    pipeline_task(a, b)
    trace_a, trace_b = load_trace(traces_root(a), "task-1"), load_trace(traces_root(b), "task-1")
    spans = merge_spans(trace_a["traces"], trace_b["traces"])
    doc = json.loads(json.dumps(chrome(spans, trace_a["sourceNodes"] + trace_b["sourceNodes"], {"taskId": "task-1"})))
    events = doc["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    meta = [e for e in events if e["ph"] == "M"]
    assert len(complete) == len(spans) and doc["otherData"] == {"taskId": "task-1"}
    for e in complete:
        assert {"name", "cat", "ts", "dur", "pid", "tid", "args"} <= e.keys()
        assert all(isinstance(e[k], int) for k in ("ts", "dur", "pid", "tid")) and e["dur"] >= 0
    names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert sorted(names.values()) == ["host-A api", "host-A rank 0", "host-A router", "host-B rank 1"]
    assert sorted(threads.values()) == ["api", "rank 0", "rank 1", "router"]
    assert {e["pid"] for e in complete} == set(names)
    by_pid = {names[e["pid"]]: e for e in complete if e["name"] == "prefill"}
    assert by_pid["host-B rank 1"]["ts"] == T0 + 120 and by_pid["host-B rank 1"]["dur"] == 250


# ---- the HTTP resources on one node (no peers) --------------------------------------------------

class NoState:
    members, departed, started = 0, frozenset(), 0.0

    def get(self, timeout: float = 5.0) -> None:
        return None


@pytest.fixture
def client(tmp_path: Path) -> falcon.testing.TestClient:
    routes = tuple(r for r in ROUTES if r.path.startswith("/v1/traces"))
    deps = Deps(replica=NoState(), master=None, runners=None, generation=None,  # type: ignore[arg-type]
                child=ChildArgs(child_id="api", title="api", home=tmp_path, run_dir=tmp_path),
                api=api_args("A", tmp_path), version="t")
    pipeline_task(tmp_path, tmp_path / "b")
    return falcon.testing.TestClient(build_app(deps, routes))


def test_endpoints_answer_in_upstreams_shapes(client: falcon.testing.TestClient):
    assert [e["taskId"] for e in client.simulate_get("/v1/traces").json["traces"]] == ["task-1"]
    listed = client.simulate_get("/v1/traces/cluster").json  # the cluster route, not a task named "cluster"
    assert [e["taskId"] for e in listed["traces"]] == ["task-1"] and listed["unreachableNodes"] == []
    assert len(client.simulate_get("/v1/traces/task-1").json["traces"]) == 5
    assert client.simulate_get("/v1/traces/task-1/stats").json["byCategory"]["decode"]["count"] == 2
    raw = client.simulate_get("/v1/traces/cluster/task-1/raw")
    assert raw.headers["content-disposition"].endswith('filename="trace_task-1.json"')
    assert "traceEvents" in raw.json
    missing = client.simulate_get("/v1/traces/nope/stats")
    assert missing.status_code == 404 and missing.json["error"]["message"] == "Trace not found: nope"
    assert client.simulate_get("/v1/traces/cluster/nope").status_code == 404
    bad = client.simulate_get("/v1/traces/a..b/raw")
    assert bad.status_code == 400 and bad.json["error"]["message"] == "Invalid task ID"
    assert client.simulate_post("/v1/traces/delete", json={"taskIds": "task-1"}).status_code == 422
    assert client.simulate_post("/v1/traces/delete", json={"taskIds": [], "x": 1}).status_code == 422
    assert client.simulate_post("/v1/traces/delete", body="{").status_code == 400
    done = client.simulate_post("/v1/traces/delete", json={"taskIds": ["task-1", "nope"]}).json
    assert done == {"deleted": ["task-1"], "notFound": ["nope"]}
    assert client.simulate_get("/v1/traces").json == {"traces": []}


# ---- the janitor ---------------------------------------------------------------------------------

def test_janitor_policy_expires_tasks_by_their_newest_file():
    now = 10 * DAY_S
    tasks = [("old", now - 4 * DAY_S), ("new", now - 1 * DAY_S), ("edge", now - 3 * DAY_S)]
    assert expired_tasks(tasks, now, 3.0) == ["old"]
    assert expired_tasks(tasks, now, 0.5) == ["edge", "new", "old"]
    assert expired_tasks(tasks, now, 0) == [] and expired_tasks(tasks, now, -1) == []


def test_janitor_sweep_deletes_expired_task_directories_only(tmp_path: Path):
    root = traces_root(tmp_path)
    now = 100 * DAY_S
    for task in ("expired", "late-part", "fresh"):
        write_part(tmp_path, part(task, "api", "A", [("http", "api", 0, 10, -1)]))
        os.utime(root / task / "api.json", (now - 5 * DAY_S, now - 5 * DAY_S))
    write_part(tmp_path, part("late-part", "rank0", "A", [("d", "decode", 0, 1, 0)]))
    os.utime(root / "late-part" / "rank0.json", (now - 1 * DAY_S, now - 1 * DAY_S))
    os.utime(root / "fresh" / "api.json", (now, now))
    (root / "empty").mkdir()
    os.utime(root / "empty", (now - 9 * DAY_S, now - 9 * DAY_S))
    (root / "notes.txt").write_text("kept")
    os.utime(root / "notes.txt", (0, 0))
    assert sorted(sweep(root, now, 3.0)) == ["empty", "expired"]
    assert sorted(p.name for p in root.iterdir()) == ["fresh", "late-part", "notes.txt"]
    assert sweep(tmp_path / "nowhere", now, 3.0) == []


def test_tracing_config_keys(tmp_path: Path):
    assert config.load(home=tmp_path, env={}).tracing_enabled is False
    (tmp_path / "skulk.yaml").write_text("tracing: {enabled: true, retention_days: 7}\n")
    cfg = config.load(home=tmp_path, env={})
    assert cfg.tracing_enabled is True and cfg.trace_retention_days == 7.0
    assert config.load(home=tmp_path, env={"SKULK_TRACING_ENABLED": "0"}).tracing_enabled is False
    with pytest.raises(config.ConfigError, match="tracing.enabled"):
        config.validate({"tracing": {"enabled": "yes"}}, tmp_path)
