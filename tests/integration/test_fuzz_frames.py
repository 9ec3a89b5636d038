"""Fuzzing every ZeroMQ port of a real node serving the demo model: random, truncated,
oversized and wrong-type frames (tools/fuzz_frames.py) at the cluster ports from outside and
the node-local ports from this process (tools/fuzz_ports.py). Pass: no role crashed or
restarted, memory bounded, bad frames logged once per peer (not per frame), and the node
serves a normal request afterwards. `SKULK_FUZZ_SECONDS=600` runs it deeply."""

from __future__ import annotations

import os
import random

import pytest

from tests.integration.conftest import DEMO_DIR
from tests.integration.serving import MODEL, http_json, wait_model_ready
from tools.fuzz_checks import NodeProbe, problems
from tools.fuzz_ports import fire, node_targets, runner_endpoints, runner_target

SECONDS = float(os.environ.get("SKULK_FUZZ_SECONDS", "15"))


@pytest.mark.timeout(SECONDS + 240)
def test_every_port_survives_bad_frames(nodes, demo_model):
    node = nodes(args=("--place", MODEL), models={DEMO_DIR: demo_model})
    wait_model_ready(node)
    runners = runner_endpoints(node.home)
    assert runners, "no runner endpoint on the bus"
    probe = NodeProbe(node.home, node.url, node.pid)
    assert probe.serves() == ""  # warm: the runner's first request allocates what later ones reuse
    before = probe.snapshot()
    seed = random.randrange(2**32)
    print(f"frame fuzz seed {seed}")
    targets = node_targets(node.home, node.cluster_port) + [runner_target(e) for e in runners.values()]
    counts = fire(targets, SECONDS, seed)
    print(f"frames sent {sum(counts.frames.values())} raw TCP {sum(counts.raw.values())} "
          f"by target {dict(counts.frames)} by kind {dict(counts.kinds)}")
    assert all(counts.frames[t.name] > 0 for t in targets), counts.frames
    assert probe.serves() == ""
    after = probe.snapshot()
    assert problems(before, after, SECONDS) == [], node.log_tail()
    status, events = http_json(f"{node.url}/events?limit=50")  # whatever the bus carried was logged safely
    assert status == 200 and isinstance(events, list)

