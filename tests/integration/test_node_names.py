"""Node names on real nodes: the name is the friendlyName, a second live node with a name
already in the cluster refuses to join and says why; a bad `model_store` stops the node at
start (exit 78) naming the key."""

from __future__ import annotations

import subprocess
import sys
import uuid

import yaml

from skulk.scripts.ports import free_port
from skulk.supervisor import exitcodes
from skulk.wire.cluster import Membership
from tests.integration.cluster import FAST, converged, node_args, state_of
from tests.integration.harness import BusWatcher, wait_until
from tests.integration.serving import http_json


def test_a_second_node_with_a_taken_name_refuses_to_join(nodes):
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    first = nodes("n0", config=FAST, args=node_args(namespace, []))
    second = nodes("n1", config=FAST, args=node_args(namespace, [first]))
    wait_until(first, lambda: converged([first, second], 2), 30, "formation")
    names = {i: v["friendlyName"] for i, v in state_of(first)["nodeIdentities"].items()}
    holder_id = http_json(f"{second.url}/node_id")[1]
    assert sorted(names.values()) == ["n0", "n1"] and names[holder_id] == "n1"

    # Another home, the name n1 again; it knows only n0 (which does not hold the name).
    twin = nodes("twin", config=FAST, args=(*node_args(namespace, [first]), "--node-name", "n1"))
    gossip_log = twin.home / "logs" / "gossip.log"
    wait_until(twin, lambda: "refused to join" in gossip_log.read_text(), 20, "the twin's refusal")
    line = next(ln for ln in gossip_log.read_text().splitlines() if "refused to join" in ln)
    assert "ERROR" in line and "'n1'" in line and holder_id in line, line
    print(f"the twin says: {line}")

    watcher = BusWatcher(twin, b"evt.cluster.")  # 2 s of its hellos: it stays a cluster of one
    try:
        sizes = {len(m.members) for _t, m in watcher.messages(2.0) if isinstance(m, Membership)}
    finally:
        watcher.close()
    assert sizes == {1}
    assert list(state_of(twin)["nodeIdentities"].values())[0]["friendlyName"] == "n1"
    for node in (first, second):  # the cluster never admitted it
        state = state_of(node)
        assert state is not None and len(state["nodeIdentities"]) == 2, state["nodeIdentities"]
    assert "not admitted" in (second.home / "logs" / "gossip.log").read_text()


def test_a_bad_model_store_stops_the_node_at_start_naming_the_key(tmp_path):
    home = tmp_path / "bad"
    home.mkdir()
    store = tmp_path / "store"
    (home / "skulk.yaml").write_text(yaml.safe_dump({"model_store": {
        "store_host": "bad", "store_path": str(store),
        "staging": {"node_cache_path": str(store)}}}))
    out = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "run", "--home", str(home),
                          "--node-name", "bad", "--listen", "127.0.0.1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == exitcodes.CONFIG_ERROR == 78
    assert "model_store.staging.node_cache_path" in out.stderr and str(home / "skulk.yaml") in out.stderr
    print(out.stderr.strip())


def test_a_node_with_a_model_store_boots_with_the_store_arguments(nodes, tmp_path):
    """The store and master roles accept what `role_args` gives them (a role that rejected
    its arguments would never report ready)."""
    store = {"store_host": "elsewhere", "store_path": str(tmp_path / "store"), "store_port": free_port(),
             "node_overrides": {"withstore": {"staging": {"staging_keep_recent_gb": 0}}}}
    node = nodes("withstore", config={**FAST, "model_store": store})
    status = node.status()
    for role in ("store", "master", "gossip"):
        assert status[role].state == "running" and status[role].restarts == 0, status[role]
