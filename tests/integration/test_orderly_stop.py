"""A signal to the node's whole process group at once is an orderly, quiet stop.

systemd's default `KillMode=control-group` sends SIGTERM to every process of the unit, and
Ctrl-C in a terminal sends SIGINT to the whole foreground group: each child gets the signal
together with the supervisor, usually exits before being asked, and must be counted as part of
the stop (no "exited unexpectedly", no restart, no escalation, no traceback).
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from skulk.node import exitcodes
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import Node, wait_until
from tests.integration.serving import MODEL, wait_model_ready

STOP_DEADLINE_S = 20.0
"""The root's exit after the group signal (well under a second on an idle machine): the api's
graceful stop is at most 3 s, and no child may need the SIGKILL that comes `shutdown_s` (5 s)
after an unheeded SIGTERM (`assert_quiet` looks for it)."""


def stop_group(node: Node, sig: signal.Signals) -> None:
    """Signal every process of the node's group at once; the root exits 0, leaving nothing."""
    pids = node.group_pids()
    t0 = time.monotonic()
    os.killpg(node.pid, sig)
    code = node.proc.wait(timeout=STOP_DEADLINE_S)
    took = time.monotonic() - t0
    print(f"{sig.name} to the group: {len(pids)} processes, root exited {code} in {took:.3f}s")
    assert code == exitcodes.CLEAN, node.log_tail()
    assert node.group_pids() == []


def assert_quiet(node: Node, sig: signal.Signals) -> None:
    """Every log of the node (each role's file and the node's own stdout/stderr): no failure,
    no traceback, nothing restarted or killed after the signal, and the stop is reported."""
    texts = {p.name: p.read_text(errors="replace") for p in sorted((node.home / "logs").iterdir())}
    texts["node.out"] = node.log_path.read_text(errors="replace")
    for name, text in texts.items():
        for word in ("unexpectedly", "Traceback", "KeyboardInterrupt", "escalat", "SIGKILL"):
            assert word not in text, f"{word!r} in {name}:\n{text[-3000:]}"
    sup = texts["supervisor.log"]
    marker = f"signal {sig.name} -> stop"
    assert marker in sup, sup[-3000:]
    after = sup.split(marker, 1)[1]
    assert " started (pid" not in after, after
    assert "node stopped (exit code 0 (clean))" in after, after


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_group_signal_stops_a_serving_node_quietly(nodes, demo_model, sig):
    node = nodes(args=("--place", MODEL), models={DEMO_DIR: demo_model})
    runner = wait_model_ready(node)
    stop_group(node, sig)
    assert_quiet(node, sig)
    sup = (node.home / "logs" / "supervisor.log").read_text()
    assert f"{runner} stopped (pid" in sup and "runners stopped" in sup


def test_ctrl_c_while_the_roles_and_a_runner_boot_is_quiet(nodes, demo_model):
    """SIGINT in the middle of the children's imports: it waits (blocked) until each role has its
    handlers, instead of a KeyboardInterrupt traceback; the runner is still loading mlx."""
    node = nodes(args=("--place", MODEL), models={DEMO_DIR: demo_model}, ready=False)
    # the supervisor's log, not its bus event: on a fast machine the runner starts before a
    # watcher subscribed after the node's start would hear of it
    sup = node.home / "logs" / "supervisor.log"
    wait_until(node, lambda: re.search(r"runner-\w+ started \(pid", sup.read_text() if sup.exists() else ""), 60,
               "a runner started")
    stop_group(node, signal.SIGINT)
    assert_quiet(node, signal.SIGINT)


def test_a_role_stuck_in_boot_ends_at_once_on_the_group_signal(nodes):
    """The janitor blocks in its boot (as a runner loading a model does): the signal ends the
    boot at once with exit 0, instead of the SIGKILL the supervisor would send `shutdown_s`
    after its own SIGTERM (or the signal's default action, -SIGTERM, before a role's handlers)."""
    node = nodes(env={"SKULK_FAULTS": "janitor@boot=hang"}, ready=False)
    for role in ("bus", "eventlog", "store", "gossip", "master", "worker", "api"):
        node.wait_ready(role, timeout=30)
    # in its boot, its handlers set: a signal a few ms after its fork would find none yet
    janitor_log = node.home / "logs" / "janitor.log"
    wait_until(node, lambda: "FAULT INJECTION: janitor at boot" in (
        janitor_log.read_text() if janitor_log.exists() else ""), 30, "the janitor stuck in its boot")
    assert node.status()["janitor"].state == "starting"
    stop_group(node, signal.SIGTERM)
    assert_quiet(node, signal.SIGTERM)
    logs = node.home / "logs"
    assert "janitor: SIGTERM while booting, stopping" in (logs / "janitor.log").read_text()
    assert "janitor stopped (pid" in (sup := (logs / "supervisor.log").read_text())
    assert "exit code 0 (clean)" in sup.split("janitor stopped (pid", 1)[1].splitlines()[0]
