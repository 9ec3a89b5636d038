"""Node names on real nodes: nodes given no name on one machine (one host name) take derived
names, form one cluster and serve; a given name is the friendlyName, and a second live node
given a name already in the cluster refuses to join and says why; a bad `model_store` stops the
node at start (exit 78) naming the key."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid

import yaml

from skulk.node import exitcodes, node_identity
from skulk.scripts.admin_client import format_status
from skulk.wire.cluster import Membership
from skulk.wire.control import AdminVerb
from skulk.wire.topics import EVT_CLUSTER
from tests.integration.cluster import FAST, converged, node_args, state_of
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import BusWatcher, wait_until
from tests.integration.serving import MODEL, http_json, wait_model_ready
from tools.ports import free_port


def test_three_nodes_given_no_names_on_one_machine_form_one_cluster_and_serve(nodes, demo_model):
    """As a user starts them: each its own home and ports, bootstrap peers, no names; one host
    name for all three."""
    host = socket.gethostname()
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    cluster = [nodes("a", config=FAST, args=node_args(namespace, []), models={DEMO_DIR: demo_model})]
    cluster += [nodes(h, config=FAST, args=node_args(namespace, cluster[:1]), models={DEMO_DIR: demo_model})
                for h in ("b", "c")]
    wait_until(cluster[0], lambda: converged(cluster, 3), 30, "3 nodes given no names in one cluster")
    print(f"3 nodes given no names formed one cluster {time.monotonic() - t0:.2f}s after the first start")
    ids = [http_json(f"{n.url}/node_id")[1] for n in cluster]
    names = {i: v["friendlyName"] for i, v in state_of(cluster[0])["nodeIdentities"].items()}
    derived = [node_identity.derive(host, (n.home / node_identity.SUFFIX_FILE).read_text().strip())
               for n in cluster]
    assert names[ids[0]] == host  # the first holds the host name; the others went by their own
    assert [names[ids[1]], names[ids[2]]] == derived[1:] and len(set(names.values())) == 3, names
    for node in cluster[1:]:  # every node shows the same names
        assert {i: v["friendlyName"] for i, v in state_of(node)["nodeIdentities"].items()} == names
    for node, i in zip(cluster[1:], ids[1:]):
        assert (node.home / node_identity.TAKEN_FILE).read_text().strip() == names[i]  # kept for next start
        line = next(ln for ln in (node.home / "logs" / "gossip.log").read_text().splitlines() if "goes by" in ln)
        assert f"{host!r}" in line and f"{names[i]!r}" in line, line
        reply = node.admin(AdminVerb.STATUS)
        assert reply.node_name == names[i] and format_status(reply).startswith(f"node {names[i]},")
    assert not (cluster[0].home / node_identity.TAKEN_FILE).exists()
    assert not any("refused to join" in (n.home / "logs" / "gossip.log").read_text() for n in cluster)
    print("names:", ", ".join(names[i] for i in ids))

    # It serves: placed through the third node's API, answered through the second's.
    status, body = http_json(f"{cluster[2].url}/place_instance", {"model_id": MODEL})
    assert status == 200, body
    wait_model_ready(cluster[1])
    status, reply = http_json(f"{cluster[1].url}/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 8})
    assert status == 200 and reply["choices"][0]["message"]["content"], reply
    assert reply["usage"]["completion_tokens"] > 0


def test_a_second_node_with_a_taken_name_refuses_to_join(nodes):
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    first = nodes("n0", config=FAST, args=node_args(namespace, []), node_name="n0")
    second = nodes("n1", config=FAST, args=node_args(namespace, [first]), node_name="n1")
    wait_until(first, lambda: converged([first, second], 2), 30, "formation")
    names = {i: v["friendlyName"] for i, v in state_of(first)["nodeIdentities"].items()}
    holder_id = http_json(f"{second.url}/node_id")[1]
    assert sorted(names.values()) == ["n0", "n1"] and names[holder_id] == "n1"

    # Another home, the name n1 again; it knows only n0 (which does not hold the name).
    twin = nodes("twin", config=FAST, args=node_args(namespace, [first]), node_name="n1")
    gossip_log = twin.home / "logs" / "gossip.log"
    wait_until(twin, lambda: "refused to join" in gossip_log.read_text(), 20, "the twin's refusal")
    line = next(ln for ln in gossip_log.read_text().splitlines() if "refused to join" in ln)
    assert "ERROR" in line and "'n1'" in line and holder_id in line, line
    print(f"the twin says: {line}")

    watcher = BusWatcher(twin, EVT_CLUSTER.prefix)  # 2 s of its hellos: it stays a cluster of one
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
    node = nodes("withstore", config={**FAST, "model_store": store}, node_name="withstore")  # the override's key
    status = node.status()
    for role in ("store", "master", "gossip"):
        assert status[role].state == "running" and status[role].restarts == 0, status[role]
