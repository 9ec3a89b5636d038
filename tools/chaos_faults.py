"""The chaos soak's faults: which one comes next (pure, from a seeded RNG) and how it is done.

Kinds: SIGKILL of one role or runner; SIGSTOP then SIGCONT (after a random pause) of one role
or runner; SIGKILL of a node's whole tree, of the current master's tree, or of its root
supervisor alone (its children must exit by themselves); SIGSTOP/SIGCONT of a whole node.
A node whose tree is gone is restarted with the same home by the soak, as a service manager
would; so is a node whose root gave up (its restart budget was exhausted: exit 70).
"""

from __future__ import annotations

import enum
import os
import random
import signal
import threading
from dataclasses import dataclass

from tools.chaos_checks import ROLES
from tools.chaos_nodes import ChaosNode, Proc, signal_proc


class Kind(enum.StrEnum):
    KILL_ROLE = "kill_role"
    STOP_ROLE = "stop_role"
    KILL_RUNNER = "kill_runner"
    STOP_RUNNER = "stop_runner"
    KILL_NODE = "kill_node"
    KILL_MASTER = "kill_master_node"
    KILL_SUPERVISOR = "kill_supervisor"
    FREEZE_NODE = "freeze_node"


WEIGHTS = {Kind.KILL_ROLE: 24, Kind.STOP_ROLE: 12, Kind.KILL_RUNNER: 16, Kind.STOP_RUNNER: 10,
           Kind.KILL_NODE: 10, Kind.KILL_MASTER: 12, Kind.KILL_SUPERVISOR: 8, Kind.FREEZE_NODE: 8}
TARGET_ROLES = (*ROLES, "api worker")
NODE_LOSS = (Kind.KILL_NODE, Kind.KILL_MASTER, Kind.KILL_SUPERVISOR)
"""Faults after which the node's tree is gone and the soak starts it again (same home)."""


@dataclass(frozen=True)
class Plan:
    kind: Kind
    node: str
    target: str = ""  # a role name or a runner id ("" for the whole node)
    pause_s: float = 0.0  # SIGSTOP kinds: how long before SIGCONT

    @property
    def label(self) -> str:
        """How the report counts it: `SIGKILL master`, `SIGSTOP runner`, `SIGKILL node tree`."""
        what = {Kind.KILL_RUNNER: "runner", Kind.STOP_RUNNER: "runner"}.get(self.kind, self.target)
        return {Kind.KILL_ROLE: f"SIGKILL {what}", Kind.KILL_RUNNER: "SIGKILL runner",
                Kind.STOP_ROLE: f"SIGSTOP {what}", Kind.STOP_RUNNER: "SIGSTOP runner",
                Kind.KILL_NODE: "SIGKILL node tree", Kind.KILL_MASTER: "SIGKILL master's tree",
                Kind.KILL_SUPERVISOR: "SIGKILL root supervisor", Kind.FREEZE_NODE: "SIGSTOP node tree"}[self.kind]


def plan_fault(rng: random.Random, runners: dict[str, list[str]], master: str | None,
               kinds: tuple[Kind, ...] = tuple(Kind)) -> Plan:
    """The next fault. `runners`: node name -> its runner ids (every node listed); `master`:
    the name of the node that leads now."""
    names = sorted(runners)
    choices = [k for k in kinds if (k not in (Kind.KILL_RUNNER, Kind.STOP_RUNNER) or any(runners.values()))
               and (k != Kind.KILL_MASTER or master is not None)]
    kind = rng.choices(choices, weights=[WEIGHTS[k] for k in choices])[0]
    if kind == Kind.KILL_MASTER:
        return Plan(kind, master or "")
    if kind in (Kind.KILL_RUNNER, Kind.STOP_RUNNER):
        node = rng.choice([n for n in names if runners[n]])
        return Plan(kind, node, rng.choice(sorted(runners[node])),
                    round(rng.uniform(0.5, 15.0), 2) if kind == Kind.STOP_RUNNER else 0.0)
    node = rng.choice(names)
    if kind == Kind.KILL_ROLE:
        return Plan(kind, node, rng.choice(TARGET_ROLES))
    if kind == Kind.STOP_ROLE:
        return Plan(kind, node, rng.choice(TARGET_ROLES), round(rng.uniform(0.5, 6.0), 2))
    if kind == Kind.FREEZE_NODE:
        return Plan(kind, node, "", round(rng.uniform(0.5, 6.0), 2))
    return Plan(kind, node)


def find(node: ChaosNode, plan: Plan) -> Proc | None:
    """The process a role or runner fault aims at (by the node's group and the title)."""
    for proc in node.procs():
        if plan.kind in (Kind.KILL_RUNNER, Kind.STOP_RUNNER):
            if proc.runner_id == plan.target:
                return proc
        elif proc.role == plan.target:
            return proc
    return None


def inject(node: ChaosNode, plan: Plan, stop: threading.Event) -> str:
    """Do it (returns a note for the record; SIGSTOP kinds return after the SIGCONT)."""
    if plan.kind in (Kind.KILL_NODE, Kind.KILL_MASTER):
        node.kill_group()
        return f"group {node.groups[-1]} killed"
    if plan.kind == Kind.KILL_SUPERVISOR:
        assert node.proc is not None
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait(timeout=10)
        return f"root {node.proc.pid} killed"
    if plan.kind == Kind.FREEZE_NODE:
        os.killpg(node.pgid, signal.SIGSTOP)
        stop.wait(plan.pause_s)
        os.killpg(node.pgid, signal.SIGCONT)
        return f"group {node.pgid} frozen {plan.pause_s}s"
    proc = find(node, plan)
    if proc is None:
        return "target not running (skipped)"
    if plan.kind in (Kind.KILL_ROLE, Kind.KILL_RUNNER):
        return f"pid {proc.pid} killed" if signal_proc(proc, signal.SIGKILL) else "target gone"
    if not signal_proc(proc, signal.SIGSTOP):
        return "target gone"
    stop.wait(plan.pause_s)
    alive = signal_proc(proc, signal.SIGCONT)
    return f"pid {proc.pid} stopped {plan.pause_s}s" + ("" if alive else " (gone before SIGCONT)")
