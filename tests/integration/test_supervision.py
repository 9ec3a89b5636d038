"""The process tree under real failures: kill -9, crash loops, wedged boots, frozen children."""

from __future__ import annotations

import os
import signal
import time

import psutil

from skulk.node import exitcodes
from skulk.supervisor.tree import ROLES
from skulk.wire.control import AdminVerb
from skulk.wire.events import ChildLifecycle
from skulk.wire.topics import EVT_SUPERVISOR
from tests.integration.harness import BusWatcher, Node, wait_until
from tests.integration.patience import patience

ROOMY = {"supervisor": {"intensity": 50, "period_s": 60}}


def test_kill9_of_each_role_restarts_only_that_role(nodes):
    node = nodes(config=ROOMY)
    for role in ROLES:
        before = node.status()
        t0 = time.monotonic()
        os.kill(before[role].pid, signal.SIGKILL)
        reply = node.wait_ready(role, min_restarts=before[role].restarts + 1, timeout=2.0)
        took = time.monotonic() - t0
        print(f"kill -9 {role}: back and ready in {took:.3f}s")
        after = {c.id: c for c in reply.children}
        assert after[role].pid != before[role].pid
        assert after[role].restarts == before[role].restarts + 1
        for sibling in ROLES:
            if sibling != role:
                assert after[sibling].pid == before[sibling].pid, f"{sibling} restarted with {role}"
                assert after[sibling].restarts == before[sibling].restarts


def _heard_restart(node: Node, watcher: BusWatcher, child: str) -> int:
    """Restart `child` by hand (which costs no restart budget) until `watcher` hears it come
    back; returns its restart count then. ZeroMQ joins a subscriber, and the supervisor's own
    publisher to the bus, in the background: a crash loop run at once after the node's start
    is over in tens of milliseconds, before either may have joined (CI lost the escalation so)."""
    deadline = time.monotonic() + patience(15)
    while time.monotonic() < deadline:
        want = node.status()[child].restarts + 1
        node.admin(AdminVerb.RESTART, child)
        node.wait_ready(child, min_restarts=want, timeout=5)  # one restart at a time: none overlap
        for _topic, msg in watcher.messages(1.0, stretch=False):
            if isinstance(msg, ChildLifecycle) and msg.child_id == child and msg.event == "ready" \
                    and msg.restarts == want:
                return want
    raise AssertionError(f"the supervisor's events about {child} never reached the bus")


def test_crash_loop_exhausts_budget_and_escalates(nodes):
    node = nodes()  # default root budget: 3 restarts in 60 s
    watcher = BusWatcher(node, EVT_SUPERVISOR.prefix)
    try:
        base = _heard_restart(node, watcher, "janitor")
        for n in range(1, 4):
            pid = node.status()["janitor"].pid
            os.kill(pid, signal.SIGKILL)
            node.wait_ready("janitor", min_restarts=base + n, timeout=5)
        t0 = time.monotonic()
        os.kill(node.status()["janitor"].pid, signal.SIGKILL)
        watcher.wait_for(lambda m: isinstance(m, ChildLifecycle) and m.event == "escalate", 5)
    finally:
        watcher.close()
    code = node.proc.wait(timeout=patience(30))
    print(f"escalation: root exited {code} {time.monotonic() - t0:.3f}s after the 4th kill")
    assert code == exitcodes.ESCALATED
    assert node.group_pids() == []
    log = node.log_tail(60).split("; escalating")[-1]  # (the janitor's manual restart stopped it too)
    order = [line.split("]")[1].split()[0] for line in log.splitlines()
             if " stopped (pid" in line and "supervisor:" in line]
    assert order == ["runners", *reversed([r for r in ROLES if r != "janitor"])], order


def test_child_that_never_reports_ready_is_killed_at_its_deadline(nodes):
    node = nodes(config={"children": {"ready_timeout_s": 3.0}},
                 env={"SKULK_FAULTS": "janitor@boot=hang"}, ready=False)
    # (not its first "started": on a fast machine the janitor starts before a watcher subscribed
    # after the node's start hears of it; the kill comes seconds later)
    watcher = BusWatcher(node, EVT_SUPERVISOR.prefix + b"janitor")
    try:
        killed = watcher.wait_for(lambda m: m.event == "ready_timeout", 15)
        exited = watcher.wait_for(lambda m: m.event == "exited", 10)
        restarted = watcher.wait_for(lambda m: m.event == "started", 10)
    finally:
        watcher.close()
    print(f"never-ready janitor killed (deadline 3.0s); exit: {exited.detail}")
    assert killed.restarts == 0 and exited.pid == killed.pid  # the first janitor, at its own deadline
    assert killed.detail == "watchdog kill"  # the deadline itself is unit-tested (watchdog.verdict)
    assert "did not report ready within 3.0s" in (node.home / "logs" / "supervisor.log").read_text()
    assert restarted.pid != killed.pid and restarted.restarts == killed.restarts + 1
    assert node.status()["bus"].restarts == 0


def test_a_child_slow_to_boot_but_working_is_waited_for_not_killed(nodes):
    """A busy machine is not a wedged one: a role that computes past its ready deadline (as on a
    saturated machine) is given more time and comes up, unkilled and uncounted; the idle one
    above (0 % CPU, as a wedged GPU leaves it) is killed at its deadline."""
    node = nodes(config={"children": {"ready_timeout_s": 3.0}},  # patience: 10x, 30 s
                 env={"SKULK_FAULTS": "janitor@boot=busy:6"}, ready=False)
    reply = node.wait_ready(timeout=30)
    janitor = {c.id: c for c in reply.children}["janitor"]
    print(f"a janitor computing for 6s at boot (ready deadline 3s) ready, {janitor.restarts} restarts")
    assert janitor.restarts == 0
    log = (node.home / "logs" / "supervisor.log").read_text()
    assert "janitor" in log and "past its ready deadline but making progress" in log
    assert "did not report ready" not in log


def test_frozen_child_misses_heartbeats_and_is_replaced(nodes):
    node = nodes(config={"heartbeat": {"interval_s": 0.25, "liveness": 3}})
    watcher = BusWatcher(node, EVT_SUPERVISOR.prefix + b"gossip")
    try:
        frozen = node.status()["gossip"].pid
        t0 = time.monotonic()
        os.kill(frozen, signal.SIGSTOP)
        missed = watcher.wait_for(lambda m: m.event == "heartbeat_missed", 10)
        took = time.monotonic() - t0
    finally:
        watcher.close()
    reply = node.wait_ready("gossip", min_restarts=1, timeout=10)
    print(f"SIGSTOPped gossip declared dead {took:.3f}s after freezing (liveness 3 x 0.25s)")
    assert missed.pid == frozen
    assert {c.id: c for c in reply.children}["gossip"].pid != frozen
    assert not _alive(frozen)


def test_sigterm_to_root_stops_everything_cleanly(nodes):
    node = nodes()
    pids = node.group_pids()
    assert len(pids) >= 9  # root, 7 roles, gunicorn worker
    t0 = time.monotonic()
    os.kill(node.pid, signal.SIGTERM)
    code = node.proc.wait(timeout=patience(30))
    print(f"SIGTERM: {len(pids)} processes stopped in {time.monotonic() - t0:.3f}s, exit {code}")
    assert code == exitcodes.CLEAN
    assert node.group_pids() == []
    assert "SIGKILL" not in node.log_tail(30)


def test_a_failed_runner_is_recreated_by_the_leader_until_a_crash_loop(nodes, demo_model):
    """Runners come and go with the state. A killed runner is not restarted by its supervisor:
    the leader deletes its instance and re-creates it with back-off (a new instance, a new
    runner); the third failure within 60 s is a crash loop, and the instance is given up."""
    from tests.integration.conftest import DEMO_DIR
    from tests.integration.harness import wait_until
    from tests.integration.serving import MODEL, http_json, wait_model_ready

    node = nodes(args=("--place", MODEL), models={DEMO_DIR: demo_model})
    runner = wait_model_ready(node)
    assert node.status()[runner].supervisor == "runners"
    seen = [runner]
    for n in (1, 2):
        t0 = time.monotonic()
        os.kill(node.status()[seen[-1]].pid, signal.SIGKILL)
        seen.append(wait_model_ready(node, exclude=tuple(seen)))
        state = http_json(f"{node.url}/state")[1]
        (note,) = [d["reason"] for d in state["deletedInstances"].values() if seen[-2] in d["reason"]]
        print(f"runner killed ({n}): instance re-created and ready {time.monotonic() - t0:.2f}s later; {note}")
        assert "signal 9 (SIGKILL)" in note and f"re-creating in {0.5 * 2 ** (n - 1):.1f}s" in note
        assert seen[-2] not in node.status() and len(state["instances"]) == 1
    os.kill(node.status()[seen[-1]].pid, signal.SIGKILL)

    def given_up():
        state = http_json(f"{node.url}/state")[1]
        return not state["instances"] and any("crash loop" in d["reason"] for d in state["deletedInstances"].values())

    wait_until(node, given_up, 30, "instance given up")
    rows = node.status()
    assert rows["runners"].restarts == 0 and all(rows[r].restarts == 0 for r in ROLES)
    # Placed again, a runner starts; deleted, the runner process is stopped.
    status, body = http_json(f"{node.url}/place_instance", {"model_id": MODEL})
    assert status == 200, body
    again = wait_model_ready(node, exclude=tuple(seen))
    assert http_json(f"{node.url}/instance/{body['instance_id']}", method="DELETE")[0] == 200
    watcher = BusWatcher(node, EVT_SUPERVISOR.prefix)
    try:
        if again in node.status():
            watcher.wait_for(lambda m: m.child_id == again and m.event == "stopped", 20)
    finally:
        watcher.close()
    assert again not in node.status()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_children_exit_by_themselves_when_the_root_is_killed(nodes):
    import psutil

    node = nodes()
    children = [psutil.Process(p) for p in node.group_pids() if p != node.pid]
    t0 = time.monotonic()
    os.kill(node.pid, signal.SIGKILL)
    node.proc.wait(timeout=patience(5))
    _gone, alive = psutil.wait_procs(children, timeout=5)
    print(f"root SIGKILLed: {len(children)} children exited by themselves in "
          f"{time.monotonic() - t0:.3f}s")
    assert alive == []


def test_sighup_restarts_the_node_in_place(nodes):
    node = nodes()
    before = node.status()
    os.kill(node.pid, signal.SIGHUP)
    deadline = time.monotonic() + patience(10)
    while time.monotonic() < deadline:
        # Each try is a blocking `wait` of a few seconds; the stopping incarnation answers "node is
        # stopping", and a try it read but could not answer before the exec is asked again.
        reply = node.admin(AdminVerb.WAIT, timeout_s=min(5.0, deadline - time.monotonic()), request_timeout=2.0)
        rows = {c.id: c for c in reply.children}
        if reply.ok and rows["bus"].pid != before["bus"].pid:
            break
    assert reply.ok and reply.root_pid == node.pid
    assert all(rows[r].pid != before[r].pid for r in ROLES)


def _zombies_of(pid: int) -> list[int]:
    return [c.pid for c in psutil.Process(pid).children() if c.status() == psutil.STATUS_ZOMBIE]


def test_roles_are_forked_from_the_zygote_and_start_fresh_once_it_is_gone(nodes):
    node = nodes(config=ROOMY)
    status = node.status()
    assert all(status[role].forked for role in ROLES), {r: status[r].forked for r in ROLES}
    assert all(psutil.Process(status[role].pid).ppid() == node.pid for role in ROLES)

    # The api's arbiter killed: its gunicorn workers, orphaned, come to the supervisor (a child
    # subreaper) and are reaped; the api comes back forked.
    workers = [c.pid for c in psutil.Process(status["api"].pid).children()]
    assert workers
    os.kill(status["api"].pid, signal.SIGKILL)
    reply = node.wait_ready("api", min_restarts=1, timeout=10)
    assert {c.id: c for c in reply.children}["api"].forked
    wait_until(node, lambda: not any(psutil.pid_exists(w) for w in workers) and not _zombies_of(node.pid),
               10, "the old api workers gone and reaped")

    # Without the zygote, a role starts as a fresh interpreter and the node goes on.
    zygotes = [c for c in psutil.Process(node.pid).children() if c.name() == "skulk: zygote"]
    assert len(zygotes) == 1
    zygotes[0].kill()
    os.kill(status["janitor"].pid, signal.SIGKILL)
    reply = node.wait_ready("janitor", min_restarts=1, timeout=10)
    after = {c.id: c for c in reply.children}
    assert not after["janitor"].forked and after["janitor"].pid != status["janitor"].pid
    assert after["api"].forked  # the others are left alone
    wait_until(node, lambda: not _zombies_of(node.pid), 10, "the zygote reaped")
