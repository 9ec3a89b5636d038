"""The chaos soak's replicas mode, short: four real nodes with no names, the demo model as a
single-node instance on two of them, streaming clients on every node, and whole serving nodes
SIGKILLed (`python -m tools.chaos --replicas` is the long run). The leader places a lost replica
again by itself; a stream whose instance is lost goes on on the surviving replica, so no
request may end in an error unless its own API node was the one killed."""

from __future__ import annotations

from tools.chaos import Soak, SoakConfig
from tools.chaos_report import report

SEED = 2
"""Its schedule: a serving node killed within ten seconds of the clients' start; the soak ends
once the cluster has its two replicas back."""


def test_a_replicas_soak_loses_no_stream_a_surviving_replica_could_carry(tmp_path, demo_model):
    cfg = SoakConfig(seconds=10, root=tmp_path, seed=SEED, model_dir=demo_model, nodes=4, clients=4, replicas=True,
                     min_faults=1)
    soak = Soak(cfg)
    verdict = soak.run()
    text = report(verdict, cfg, soak.faults, soak.restarts, cfg.seconds)
    assert soak.faults and all(f.converged_at is not None for f in soak.faults), text
    assert verdict.served > 0 and not verdict.hung and not verdict.replica_errors, text
    assert verdict.passed, text
    # Not vacuous: the kill cut streams mid-answer, and they went on on the surviving replica.
    logs = tmp_path.glob("n*/logs/api.log")
    went_on = sum(log.read_text(errors="replace").count("going on elsewhere") for log in logs)
    assert went_on > 0, text
