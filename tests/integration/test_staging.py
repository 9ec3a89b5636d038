"""The model store on real nodes: the model is only in the store host's `store_path`; placing it
on the other nodes stages a verified copy there (progress visible in `/state`), then serves;
copies are evicted by the policy; a corrupt store file or a killed store never loads half a
model and never hangs."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import FAST, converged, node_args, state_of
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import wait_until
from tests.integration.serving import MODEL, http_json
from tools.ports import free_port

DRAFTER_DIR = "skulk--demo-drafter"
SLOW_COPY = {"SKULK_FAULTS": "worker@stage_chunk=slow:0.02"}
"""A pause per 256 KiB chunk: the demo model's copy takes a few seconds, so its progress shows."""


def store_config(store: Path, port: int, keep_gb: float) -> dict[str, Any]:
    return {**FAST, "model_store": {"store_host": "n0", "store_path": str(store), "store_port": port,
                                    "store_http_host": "127.0.0.1",
                                    "staging": {"staging_keep_recent_gb": keep_gb}}}


@pytest.fixture
def store_cluster(nodes, demo_model, tmp_path):
    """`start(keep_gb, env)`: 3 nodes (n0 hosts the store); the demo model is only in the store."""
    def start(keep_gb: float = 0.0, env: dict[str, str] | None = None,
              companion: bool = False) -> tuple[list[Any], dict[str, str]]:
        store = tmp_path / "store"
        shutil.copytree(demo_model, store / DEMO_DIR, dirs_exist_ok=True)
        if companion:  # the demo model names a drafter (a copy of itself) as its companion
            shutil.copytree(demo_model, store / DRAFTER_DIR, dirs_exist_ok=True)
            (store / DEMO_DIR / "skulk.json").write_text('{"companions": ["skulk/demo-drafter"]}')
        config = store_config(store, free_port(), keep_gb)
        namespace = f"s-{uuid.uuid4().hex[:8]}"
        n0 = nodes("n0", config=config, args=node_args(namespace, []), node_name="n0")  # the store_host
        rest = [nodes(f"n{i}", config=config, args=node_args(namespace, [n0]), env=env) for i in (1, 2)]
        cluster = [n0, *rest]
        ids = {}
        wait_until(n0, lambda: converged(cluster, 3), 30, "3 nodes in one cluster")
        for name, node in zip(("n0", "n1", "n2"), cluster):
            ids[name] = http_json(f"{node.url}/node_id")[1]
        for node in cluster:  # the store's catalog replicated: every API lists (and places) the model
            wait_until(node, lambda n=node: MODEL in [m["id"] for m in http_json(f"{n.url}/v1/models")[1]["data"]],
                       30, "the store's model in the catalog")
        return cluster, ids
    return start


def staged(node: Any) -> Path:
    return node.home / "staging" / DEMO_DIR


def purged(node: Any) -> str:
    try:
        return (node.home / "staging" / ".skulk-purged").read_text().strip()
    except OSError:
        return ""


def downloads(node: Any, node_id: str) -> list[dict[str, Any]]:
    return (state_of(node) or {}).get("downloads", {}).get(node_id, [])


def ready_instance(node: Any) -> str | None:
    state = state_of(node) or {}
    for iid, inst in state.get("instances", {}).items():
        body = next(iter(inst.values()))
        runners = body["shardAssignments"]["runnerToShard"]
        if all("RunnerReady" in state["runners"].get(r, {}) or "RunnerRunning" in state["runners"].get(r, {})
               for r in runners):
            return iid
    return None


def chat(node: Any) -> None:
    status, body = http_json(f"{node.url}/v1/chat/completions", {
        "model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and body["usage"]["completion_tokens"] >= 1, body


def test_placing_off_the_store_host_stages_with_progress_serves_and_evicts(store_cluster):
    (n0, n1, n2), ids = store_cluster(keep_gb=0.0, env=SLOW_COPY)
    assert not (n1.home / "models" / DEMO_DIR).exists() and not staged(n1).exists()
    status, body = http_json(f"{n1.url}/place_instance", {"model_id": MODEL, "excluded_nodes": [ids["n0"], ids["n2"]]})
    assert status == 200, body  # the card comes from the replicated catalog (the store's)
    ongoing = wait_until(n1, lambda: next((d["DownloadOngoing"] for d in downloads(n1, ids["n1"])
                                           if "DownloadOngoing" in d), None), 30, "DownloadOngoing in /state")
    progress = ongoing["downloadProgress"]
    assert 0 < progress["downloadedBytes"]["inBytes"] < progress["totalBytes"]["inBytes"]
    iid = wait_until(n1, lambda: ready_instance(n1), 90, "the staged instance ready")
    assert any("DownloadCompleted" in d for d in downloads(n1, ids["n1"]))
    chat(n1)
    chat(n0)  # any node's API routes to it
    storage = http_json(f"{n1.url}/store/storage")[1]
    (entry,) = storage["stagedModels"]
    assert entry["modelId"] == MODEL and entry["inUse"] and entry["sizeBytes"] == storage["stagedTotalBytes"]
    assert entry["sizeBytes"] == sum(f.stat().st_size for f in staged(n1).rglob("*") if f.is_file())
    assert storage["diskFreeBytes"] > 0 and storage["eventLogBytes"] >= 0
    assert http_json(f"{n1.url}/instance/{iid}", method="DELETE")[0] == 200
    wait_until(n1, lambda: not staged(n1).exists(), 30, "the copy evicted on deactivation (budget 0)")
    status, health = http_json(f"{n2.url}/store/health")  # upstream's store routes, from any node
    assert status == 200 and health["storePath"].endswith("store") and health["freeBytes"] > 0
    status, registry = http_json(f"{n2.url}/store/registry")
    assert status == 200 and [e["model_id"] for e in registry["entries"]] == [MODEL]
    status, err = http_json(f"{n2.url}/store/models/nobody/none", method="DELETE")
    assert status == 404 and err["error"]["message"] == "Model nobody/none not in store"


def test_a_pipeline_over_two_non_store_nodes_stages_on_both_and_purge_clears_them(store_cluster):
    (n0, n1, n2), ids = store_cluster(keep_gb=40.0)
    status, body = http_json(f"{n2.url}/place_instance", {"model_id": MODEL, "min_nodes": 2,
                                                          "excluded_nodes": [ids["n0"]]})
    assert status == 200, body
    iid = wait_until(n2, lambda: ready_instance(n2), 120, "the 2-rank instance ready")
    assert staged(n1).exists() and staged(n2).exists()
    chat(n0)
    status, purge = http_json(f"{n0.url}/store/purge-staging", {})
    assert status == 200
    for node in (n1, n2):  # each worker acted on it (it records the purge it carried out)
        wait_until(node, lambda n=node: purged(n) == purge["commandId"], 30, "the purge applied")
    assert staged(n1).exists() and staged(n2).exists()  # in use: kept
    assert http_json(f"{n2.url}/instance/{iid}", method="DELETE")[0] == 200
    wait_until(n1, lambda: not (state_of(n1) or {}).get("instances"), 30, "instance gone")
    assert staged(n1).exists() and staged(n2).exists()  # within the 40 GB budget: kept for next time
    status, body = http_json(f"{n0.url}/store/purge-staging", {"modelId": "other/model"})
    assert status == 200 and body["message"].endswith("for model other/model")
    assert http_json(f"{n0.url}/store/purge-staging", b"")[0] in (400, 422)  # a body is required
    assert http_json(f"{n0.url}/store/purge-staging", {"everything": True})[0] == 422
    assert http_json(f"{n0.url}/store/purge-staging", {})[0] == 200
    wait_until(n1, lambda: not staged(n1).exists() and not staged(n2).exists(), 30, "purged on every node")
    assert (n0.home.parent / "store" / DEMO_DIR / "config.json").exists()  # never the store itself


def test_a_corrupt_store_file_fails_the_copy_and_the_placement_with_the_reason(store_cluster, tmp_path):
    (n0, n1, n2), ids = store_cluster()
    weights = tmp_path / "store" / DEMO_DIR / "model.safetensors"
    wait_until(n0, lambda: (tmp_path / "store" / "registry.json").exists()
               and "model.safetensors" in (tmp_path / "store" / "registry.json").read_text(), 30,
               "the store's checksums computed")
    stat = weights.stat()
    with weights.open("r+b") as f:  # bit rot: same size, same mtime, other bytes
        f.seek(stat.st_size // 2)
        byte = f.read(1)
        f.seek(stat.st_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert http_json(f"{n1.url}/place_instance", {"model_id": MODEL,
                                                  "excluded_nodes": [ids["n0"], ids["n2"]]})[0] == 200
    failed = wait_until(n1, lambda: next((d["DownloadFailed"] for d in downloads(n1, ids["n1"])
                                          if "DownloadFailed" in d), None), 60, "DownloadFailed")
    assert "sha256" in failed["errorMessage"]
    note = wait_until(n1, lambda: next((n for n in (state_of(n1) or {}).get("deletedInstances", {}).values()
                                        if "staging failed" in n["reason"]), None), 60,
                      "the placement failed with the reason")
    assert "sha256" in note["reason"]
    assert not staged(n1).exists()  # never a wrong copy where a runner could load it
    status, _ = http_json(f"{n1.url}/v1/chat/completions", {"model": MODEL, "max_tokens": 2, "messages": [
        {"role": "user", "content": "x"}]})
    assert status in (200, 404, 503)  # answered at once either way (the leader may re-create it elsewhere)


def test_a_killed_store_mid_copy_resumes_and_the_copy_is_exact(store_cluster, tmp_path):
    (n0, n1, n2), ids = store_cluster(env={"SKULK_FAULTS": "worker@stage_chunk=slow:0.1"})
    assert http_json(f"{n1.url}/place_instance", {"model_id": MODEL,
                                                  "excluded_nodes": [ids["n0"], ids["n2"]]})[0] == 200
    wait_until(n1, lambda: any("DownloadOngoing" in d for d in downloads(n1, ids["n1"])), 30, "copying")
    os.kill(n0.status()["store"].pid, signal.SIGKILL)  # its supervisor restarts it in about a second
    wait_until(n1, lambda: ready_instance(n1), 120, "the instance ready after the store came back")
    src = tmp_path / "store" / DEMO_DIR / "model.safetensors"
    staged_copy = staged(n1) / "model.safetensors"
    assert hashlib.sha256(src.read_bytes()).digest() == hashlib.sha256(staged_copy.read_bytes()).digest()
    chat(n1)


def test_a_node_reconciles_copies_orphaned_by_a_crash_at_start(nodes, demo_model, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(demo_model, store / DEMO_DIR)
    home = tmp_path / "n1"
    orphan, partial = home / "staging" / DEMO_DIR, home / "staging" / f".{DEMO_DIR}.partial"
    shutil.copytree(demo_model, orphan)
    (orphan / ".skulk-staged.json").write_text("{}")
    partial.mkdir(parents=True)
    (partial / "config.json").write_text("{}")
    config = store_config(store, free_port(), 0.0)
    config["model_store"]["store_host"] = "someone-else"
    n1 = nodes("n1", config=config)
    wait_until(n1, lambda: not orphan.exists() and not partial.exists(), 30, "orphans removed at start")
    status, err = http_json(f"{n1.url}/store/health")  # the store host is not in this cluster
    assert status == 503 and err["error"]["message"].startswith("Store unreachable")


def test_a_companion_is_staged_with_its_model_counts_as_in_use_and_goes_with_it(store_cluster):
    (n0, n1, n2), ids = store_cluster(keep_gb=0.0, companion=True)
    assert http_json(f"{n1.url}/place_instance", {"model_id": MODEL,
                                                  "excluded_nodes": [ids["n0"], ids["n2"]]})[0] == 200
    iid = wait_until(n1, lambda: ready_instance(n1), 90, "the instance ready")
    drafter = n1.home / "staging" / DRAFTER_DIR
    assert staged(n1).exists() and drafter.exists()  # staged before the runner started
    storage = http_json(f"{n1.url}/store/storage")[1]
    assert {m["modelId"]: m["inUse"] for m in storage["stagedModels"]} == {MODEL: True, "skulk/demo-drafter": True}
    unused = n1.home / "staging" / "skulk--unused"  # a copy nobody uses: the purge's visible effect
    shutil.copytree(staged(n1), unused)
    assert http_json(f"{n0.url}/store/purge-staging", {})[0] == 200
    wait_until(n1, lambda: not unused.exists(), 30, "the purge applied on n1")
    assert staged(n1).exists() and drafter.exists()  # in use, and a companion of one: kept
    assert http_json(f"{n1.url}/v1/chat/completions", {"model": MODEL, "max_tokens": 2, "messages": [
        {"role": "user", "content": "x"}]})[0] == 200
    assert http_json(f"{n1.url}/instance/{iid}", method="DELETE")[0] == 200
    wait_until(n1, lambda: not staged(n1).exists() and not drafter.exists(), 30, "both evicted (budget 0)")
