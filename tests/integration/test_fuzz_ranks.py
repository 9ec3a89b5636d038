"""Fuzzing a two-node cluster with a sharded instance: the rank control port of its rank 0
(taken from outside, like any cluster port) and both nodes' cluster ports, while the leader
and the follower master both hear the frames. Pass as for one node, on both nodes.
`SKULK_FUZZ_SECONDS=600` runs it deeply."""

from __future__ import annotations

import os
import random
import uuid

import pytest
import zmq

from tests.integration.cluster import FAST, converged, node_args, place_and_wait
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import wait_until
from tests.integration.serving import MODEL
from tools.fuzz_checks import NodeProbe, problems
from tools.fuzz_ports import (
    Target,
    fire,
    node_targets,
    rank_control_target,
    rank_controls,
    runner_endpoints,
    runner_target,
)

SECONDS = float(os.environ.get("SKULK_FUZZ_SECONDS", "10"))


@pytest.mark.timeout(SECONDS + 300)
def test_a_sharded_instance_and_two_nodes_survive_bad_frames(nodes, demo_model):
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    a = nodes("a", config=FAST, args=node_args(namespace, []), models={DEMO_DIR: demo_model})
    b = nodes("b", config=FAST, args=node_args(namespace, [a]), models={DEMO_DIR: demo_model})
    wait_until(a, lambda: converged([a, b], 2), 30, "formation")
    _, _, inst = place_and_wait(a, [a, b], {"model_id": MODEL, "min_nodes": 2})
    assert len(next(iter(inst.values()))["shardAssignments"]["runnerToShard"]) == 2, inst
    controls = rank_controls(a.home)
    runners = {**runner_endpoints(a.home), **runner_endpoints(b.home)}
    assert len(controls) == 1 and runners, (controls, runners)
    probes = [NodeProbe(n.home, n.url, n.pid) for n in (a, b)]
    assert all(p.serves() == "" for p in probes)
    before = [p.snapshot() for p in probes]

    oversized = zmq.Context.instance().socket(zmq.DEALER)  # regression: rank 0 queued these, unread
    oversized.setsockopt(zmq.LINGER, 5000)
    oversized.connect(controls[0])
    for _ in range(250):
        oversized.send(b"\0" * (4 << 20))  # 1 GiB in all (twice rank 0's bound); refused at 64 KiB a frame now
    oversized.close()

    seed = random.randrange(2**32)
    print(f"frame fuzz seed {seed}")
    targets: list[Target] = [rank_control_target(controls[0])] + [runner_target(e) for e in runners.values()]
    for n in (a, b):
        targets += [t for t in node_targets(n.home, n.cluster_port) if t.name in ("gossip", "master")]
    counts = fire(targets, SECONDS, seed)
    print(f"frames sent {sum(counts.frames.values())} by target {dict(counts.frames)}")
    assert all(p.serves() == "" for p in probes)
    for node, probe, was in zip((a, b), probes, before):
        assert problems(was, probe.snapshot(), SECONDS) == [], node.log_tail()
    rank0_log = next(p for n in (a, b) for p in (n.home / "logs").glob("runner-*.log")
                     if "rank control port: rejected" in p.read_text())
    assert rank0_log.read_text().count("rank control port: rejected") <= 20  # once per peer, then counted
