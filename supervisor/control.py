"""Admin verbs applied to the tree. Signals map onto the same verbs (one code path).

SIGTERM / SIGINT -> `stop` (orderly, exit 0); SIGHUP -> `restart` of the whole node (execv; the
admin verb drains first, the signal does not: `drain.py`). `drained` is the node's master
telling the root that a restart's drain is over (nothing left in flight).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from skulk.supervisor.slots import WorkerSlot
from skulk.supervisor.supervisor import Supervisor
from skulk.wire.control import AdminCommand, AdminReply, AdminVerb

SIGNAL_VERBS: dict[int, AdminVerb] = {
    signal.SIGTERM: AdminVerb.STOP,
    signal.SIGINT: AdminVerb.STOP,
    signal.SIGHUP: AdminVerb.RESTART,
}


@dataclass(frozen=True, slots=True)
class Waiter:
    """A `wait` verb still open: answered when satisfied or at `deadline`."""

    envelope: list[bytes]
    target: str
    min_restarts: int
    deadline: float


@dataclass(frozen=True, slots=True)
class NodeVerb:
    """A verb about the whole node, carried out by the loop: `stop` (exit 0), `restart` (drain,
    then execv in place) or `drained` (the drain is over)."""

    verb: AdminVerb


def reply(root: Supervisor, now: float, ok: bool, message: str) -> AdminReply:
    return AdminReply(ok=ok, message=message, root_pid=os.getpid(),
                      children=tuple(root.status(now)))


def satisfied(root: Supervisor, target: str, min_restarts: int, restarting: bool = False) -> bool:
    """`wait`: the target (or every worker of the tree) is running, restarted enough. Never while
    the node stops or drains for a restart (`restarting`): the caller waits for the new image."""
    if root.terminating or restarting:
        return False
    if target:
        found = root.find(target)
        if found is None:
            return False
        slot = found[1]
        return slot.state == "running" and slot.restarts >= min_restarts
    return all(slot.state == "running" for _, slot in root.workers())


def apply(cmd: AdminCommand, root: Supervisor, envelope: list[bytes],
          now: float, restarting: bool = False) -> AdminReply | Waiter | NodeVerb:
    """Carry out one admin command; errors come back as `ok=False` with a reason."""
    try:
        verb = AdminVerb(cmd.verb)
    except ValueError:
        return reply(root, now, False, f"unknown verb {cmd.verb!r} (known: {', '.join(AdminVerb)})")
    if verb is AdminVerb.STATUS:
        return reply(root, now, True, "")
    if verb is AdminVerb.WAIT:
        if cmd.target and root.find(cmd.target) is None:
            return reply(root, now, False, f"no child named {cmd.target!r}")
        if satisfied(root, cmd.target, cmd.min_restarts, restarting):
            return reply(root, now, True, "ready")
        return Waiter(envelope, cmd.target, cmd.min_restarts, now + max(cmd.timeout_s, 0.0))
    if verb in (AdminVerb.STOP, AdminVerb.RESTART, AdminVerb.DRAINED) and not cmd.target:
        return NodeVerb(verb)
    if verb is AdminVerb.DRAINED:
        return reply(root, now, False, "drained takes no target")
    if verb is AdminVerb.STOP:
        return reply(root, now, False, "stop takes no target; use terminate_child for runners")
    if verb is AdminVerb.RESTART:
        found = root.find(cmd.target)
        if found is None:
            return reply(root, now, False, f"no child named {cmd.target!r}")
        owner, _ = found
        owner.restart_child(cmd.target, now)
        return reply(root, now, True, f"restarting {cmd.target}")
    sup_found = root.find(cmd.supervisor or "runners")
    if sup_found is None or sup_found[1].alive() is False or isinstance(sup_found[1], WorkerSlot):
        return reply(root, now, False, f"no running supervisor {cmd.supervisor or 'runners'!r}")
    sup = sup_found[1].sup
    assert sup is not None
    try:
        if verb is AdminVerb.START_CHILD:
            if not cmd.target:
                return reply(root, now, False, "start_child needs a child id")
            sup.start_child(cmd.target, tuple(cmd.args), now)
            return reply(root, now, True, f"started {cmd.target}")
        if cmd.target not in sup.slots:
            return reply(root, now, False, f"no child {cmd.target!r} under {sup.spec.id}")
        sup.terminate_child(cmd.target, now)
        return reply(root, now, True, f"terminating {cmd.target}")
    except ValueError as exc:
        return reply(root, now, False, str(exc))
