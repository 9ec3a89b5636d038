"""A keyed cluster on real nodes (wire/curve.py): members with the key form a cluster and serve
across it; a node without the key cannot join, and a raw ZeroMQ client cannot read the leader's
replicated state or get an answer, while the same request with the key can."""

from __future__ import annotations

import uuid

from skulk.wire import curve
from skulk.wire.cluster import EventBatch, SnapshotPush
from tests.integration.cluster import FAST, ask_leader, converged, node_args, place_and_wait, state_of
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import wait_until
from tests.integration.serving import MODEL, http_json


def keyed(path) -> dict:
    return {**FAST, "cluster": {**FAST["cluster"], "key_file": str(path)}}


def test_only_key_holders_join_read_or_command(nodes, demo_model, tmp_path):
    key_file = tmp_path / "cluster.key"
    curve.write_key_file(key_file, curve.keygen())
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    a = nodes("a", config=keyed(key_file), args=node_args(namespace, []), models={DEMO_DIR: demo_model})
    b = nodes("b", config=keyed(key_file), args=node_args(namespace, [a]), models={DEMO_DIR: demo_model})
    master = wait_until(a, lambda: converged([a, b], 2), 30, "a keyed cluster forms")["master"]
    assert "secured with CurveZMQ" in (a.home / "logs" / "supervisor.log").read_text()

    # Serving crosses the secured sockets (the API's DEALER to a runner's ROUTER, master links).
    place_and_wait(a, [a, b], {"model_id": MODEL, "sharding": "Pipeline", "min_nodes": 2})
    status, body = http_json(f"{b.url}/v1/chat/completions", {
        "model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "over curve"}]})
    assert status == 200 and body["usage"]["completion_tokens"] >= 1

    # A node without the key is refused (logged once per peer) and never becomes a member.
    c = nodes("c", config=FAST, args=node_args(namespace, [a]))
    wait_until(a, lambda: "refused a peer" in (a.home / "logs" / "gossip.log").read_text(), 20,
               "the keyless node's hellos refused")
    assert len(state_of(a)["nodeIdentities"]) == 2
    assert len(state_of(c)["nodeIdentities"]) == 1  # it sees only itself

    # A raw client: no answer without the key; with it, the leader's state.
    leader = a if http_json(f"{a.url}/node_id")[1] == master else b
    assert ask_leader(leader.cluster_port + 1, None) is None
    stranger = tmp_path / "stranger.key"
    curve.write_key_file(stranger, curve.keygen())
    assert ask_leader(leader.cluster_port + 1, curve.load_key_file(stranger)) is None
    answer = ask_leader(leader.cluster_port + 1, curve.load_key_file(key_file))
    assert isinstance(answer, (EventBatch, SnapshotPush))
    master_log = (leader.home / "logs" / "master.log").read_text()
    assert master_log.count("refused a peer") <= 2  # once per peer, not per frame
