"""The chaos soak, short: 3 real nodes, streaming clients on every node, random faults from a
fixed seed (`tools.chaos`; the 10-minute run is `python -m tools.chaos`), and
the regressions the soak found, each reproduced on its own."""

from __future__ import annotations

import os
import signal
import uuid

from skulk.cluster.state import StateHead
from skulk.wire.cluster import Membership
from skulk.wire.topics import EVERY_EVENT
from tests.integration.cluster import FAST, converged, node_args, state_of
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import BusWatcher, wait_until
from tests.integration.serving import MODEL, http_json
from tools.chaos import Soak, SoakConfig
from tools.chaos_report import report

SEED = 2
"""Its schedule starts: a whole node frozen, a master role killed, a store role killed, a
node's whole tree killed (and goes on, at random, while time lasts)."""


def test_a_short_chaos_soak_keeps_every_promise(tmp_path, demo_model):
    # Two faults at least however slowly this machine converges; more while 40 s last.
    cfg = SoakConfig(seconds=40, root=tmp_path, seed=SEED, model_dir=demo_model, min_faults=2)
    soak = Soak(cfg)
    verdict = soak.run()
    text = report(verdict, cfg, soak.faults, soak.restarts, cfg.seconds)
    assert len(soak.faults) >= 2, text
    assert verdict.served > 0 and not verdict.hung and not verdict.leaked and not verdict.ports, text
    assert verdict.passed, text


def test_the_leaders_master_killed_alone_keeps_every_instance_and_runner(nodes, demo_model):
    """Found by the soak: the leader's master process, SIGKILLed and restarted by its
    supervisor, opened an empty one-node session; its own node's worker followed it and
    stopped the node's runners, and the other nodes, campaigning once the old leader went
    quiet, followed it too: every instance of the cluster was gone. Now the restarted master
    campaigns (its node has peers), the most informed node wins, and nothing is lost."""
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    a = nodes("a", config=FAST, args=node_args(namespace, []), models={DEMO_DIR: demo_model})
    b = nodes("b", config=FAST, args=node_args(namespace, [a]), models={DEMO_DIR: demo_model})
    first = wait_until(a, lambda: converged([a, b], 2), 30, "formation")
    by_id = {http_json(f"{n.url}/node_id")[1]: n for n in (a, b)}
    leader = by_id[first["master"]]
    follower_id = next(i for i, n in by_id.items() if n is not leader)
    status, body = http_json(f"{leader.url}/place_instance", {"model_id": MODEL, "excluded_nodes": [follower_id]})
    assert status == 200, body
    iid = body["instance_id"]

    def ready_on_leader() -> str | None:
        state = state_of(leader) or {"instances": {}, "runners": {}}
        inst = state["instances"].get(iid)
        rid = next(iter(next(iter(inst.values()))["shardAssignments"]["runnerToShard"])) if inst else None
        return rid if rid and "RunnerReady" in state["runners"].get(rid, {}) else None

    runner = wait_until(leader, ready_on_leader, 60, "the instance ready on the leader's node")
    runner_pid = leader.status()[runner].pid
    master = leader.status()["master"]
    os.kill(master.pid, signal.SIGKILL)
    leader.wait_ready("master", min_restarts=master.restarts + 1, timeout=30)
    # The node that knew the state wins the campaign (the restarted master has the leader's
    # node id: before the fix, the followers followed its empty session under that same id).
    wait_until(leader, lambda: (c := converged([a, b], 2)) and c["master"] == follower_id, 30, "a new master")
    for node in (a, b):
        state = state_of(node)
        assert iid in state["instances"], (node.home.name, state["instances"], state["deletedInstances"])
    assert leader.status()[runner].pid == runner_pid, "the restarted master's node stopped its runner"
    status, body = http_json(f"{leader.url}/v1/chat/completions",
                             {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200, body


def test_the_leaders_gossip_restarted_drops_no_live_node(nodes, demo_model):
    """Found by the soak: a gossip role restarted on the leader's node first published a
    membership of its own node alone (it had not heard its peers yet), and the leader took it
    for the loss of every other node: their instances were deleted. Now a fresh gossip with
    peers to hear publishes nothing before it has listened for a peer timeout."""
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    a = nodes("a", config=FAST, args=node_args(namespace, []), models={DEMO_DIR: demo_model})
    b = nodes("b", config=FAST, args=node_args(namespace, [a]), models={DEMO_DIR: demo_model})
    first = wait_until(a, lambda: converged([a, b], 2), 30, "formation")
    by_id = {http_json(f"{n.url}/node_id")[1]: n for n in (a, b)}
    leader = by_id[first["master"]]
    follower_id, follower = next((i, n) for i, n in by_id.items() if n is not leader)
    status, body = http_json(f"{leader.url}/place_instance", {"model_id": MODEL, "excluded_nodes": [first["master"]]})
    assert status == 200, body
    iid = body["instance_id"]
    wait_until(follower,
               lambda: any("RunnerReady" in s for s in (state_of(follower) or {"runners": {}})["runners"].values()),
               60, "the instance ready on the follower")
    gossip = leader.status()["gossip"]
    os.kill(gossip.pid, signal.SIGKILL)
    leader.wait_ready("gossip", min_restarts=gossip.restarts + 1, timeout=30)
    watcher = BusWatcher(leader, EVERY_EVENT)
    try:  # the new gossip's membership with the follower in it, then the master's next head
        watcher.wait_for(lambda m: isinstance(m, Membership) and follower_id in {x.info.node_id for x in m.members}, 30)
        head = watcher.wait_for(lambda m: isinstance(m, StateHead), 5)
    finally:
        watcher.close()
    state = wait_until(leader, lambda: (s := state_of(leader)) and s["lastEventAppliedIdx"] >= head.idx and s, 10,
                       "the leader's state at its head")
    assert iid in state["instances"] and iid not in state["deletedInstances"], state["deletedInstances"]
    assert follower_id in state["nodeIdentities"]
