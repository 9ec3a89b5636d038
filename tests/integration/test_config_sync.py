"""`PUT /config` on three real nodes: a valid change reaches every node's `skulk.yaml` (each keeps
its own secrets), a bad key is a 422 naming it and changes nothing anywhere."""

from __future__ import annotations

import json
import time
import uuid

import yaml

from tests.integration.cluster import FAST, converged, node_args
from tests.integration.harness import wait_until
from tests.integration.serving import http_json

SECRET = "hf_n2_secret_value"


def start_cluster(nodes, n: int, namespace: str, **kw):
    started = []
    for i in range(n):
        started.append(nodes(f"n{i}", config=FAST, args=node_args(namespace, started[:1]), **kw))
    return started


def get_config(node) -> dict:
    status, body = http_json(f"{node.url}/config", timeout=5)
    assert status == 200, body
    return body


def test_put_config_reaches_every_node_and_a_bad_key_changes_nothing(nodes):
    cluster = start_cluster(nodes, 3, f"t-{uuid.uuid4().hex[:8]}")
    formed = wait_until(cluster[0], lambda: converged(cluster, 3), 30, "formation")
    ids = {http_json(f"{n.url}/node_id")[1]: n for n in cluster}
    follower = next(n for i, n in ids.items() if i != formed["master"])  # its command is forwarded
    files = [n.home / "skulk.yaml" for n in cluster]
    with files[2].open("a") as f:  # n2's own secret: never shown, kept by the sync
        f.write(f"hf_token: {SECRET}\n")

    before = [get_config(n) for n in cluster]
    for node, got in zip(cluster, before):
        assert got["fileExists"] and got["config"] == FAST
        assert got["configPath"] == str((node.home / "skulk.yaml").resolve())
        assert got["effective"]["cluster_config_version"] == 0
    assert before[2]["effective"]["has_hf_token"] and SECRET not in json.dumps(before[2])

    # Invalid: 422 in the error envelope naming the key; no file changes, nothing is sent.
    raw = [p.read_bytes() for p in files]
    for bad, key in (({"runner": {"max_batchx": 3}}, "runner.max_batchx"),
                     ({"config": {"runner": {"max_batch": "8"}}}, "runner.max_batch")):
        status, body = http_json(f"{follower.url}/config", bad, method="PUT", timeout=10)
        assert status == 422 and body["error"]["code"] == 422 and key in body["error"]["message"], body
    assert [p.read_bytes() for p in files] == raw
    assert [get_config(n) for n in cluster] == before

    # Valid, on a follower: every node's file ends up with it.
    wanted = {**FAST, "runner": {"max_batch": 8}, "tracing": {"retention_days": 5.0}}
    t0 = time.monotonic()
    status, body = http_json(f"{follower.url}/config", {"config": wanted}, method="PUT", timeout=15)
    assert status == 200 and body["success"] and body["requiresRestart"] is True, body

    def synced() -> list[dict] | None:
        got = [get_config(n) for n in cluster]
        ok = all(g["config"] == wanted and g["effective"]["cluster_config_version"] == 1 for g in got)
        return got if ok else None

    after = wait_until(cluster[0], synced, 20, "the config on every node")
    print(f"PUT /config on a follower: on all 3 nodes {time.monotonic() - t0:.2f}s after the PUT")
    # Version 1: the rejected PUTs never reached the leader.
    assert {g["effective"]["cluster_config_from"] for g in after} == {ids_of(follower, ids)}
    assert yaml.safe_load(files[2].read_text()) == {**wanted, "hf_token": SECRET}
    assert SECRET not in json.dumps(after[2]) and after[2]["effective"]["has_hf_token"]
    assert yaml.safe_load(files[0].read_text()) == yaml.safe_load(files[1].read_text()) == wanted

    # The same config again changes no setting: no restart needed.
    status, body = http_json(f"{cluster[0].url}/config", wanted, method="PUT", timeout=15)
    assert status == 200 and body["requiresRestart"] is False, body


def ids_of(node, ids: dict) -> str:
    return next(i for i, n in ids.items() if n is node)
