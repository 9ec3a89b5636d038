"""The drain before an in-place restart (pure, `now` passed in).

Why: a restart stops the node's runners, and any request a runner holds would fail with it. So
the admin verb `restart` (`skulk admin restart`, `POST /admin/restart`) first drains: the root
announces the restart on the bus (`ChildLifecycle(child_id="node", event="restarting")`; the
node's master has the leader mark the node restarting, so routing sends it nothing new) and
keeps every child running; the tree stops and execs only when the node's master says nothing is left in flight
(the `drained` verb: `services/master/drain.py` decides) or when `node.drain_timeout_s` has
passed, whichever comes first. The notice is repeated while the drain lasts: the bus is lossy,
and a master restarted meanwhile must learn it too. An orderly `stop` does not drain (it stays
as quick as a service manager expects); a `stop` during a drain stops at once. Nor does SIGHUP:
a closed terminal sends it to the whole process group, and every child stops on it by itself
(`exits.py`), so there is nothing left to drain (a drain would count those exits as failures).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

ANNOUNCE_EVERY_S = 2.0


@dataclass(frozen=True, slots=True)
class Drain:
    started: float
    deadline: float
    announced: float  # when the restart notice last went out


def begin(now: float, timeout_s: float) -> Drain | None:
    """A drain of at most `timeout_s`, its first notice sent now; None (restart at once) for 0."""
    return Drain(started=now, deadline=now + timeout_s, announced=now) if timeout_s > 0 else None


def expired(drain: Drain, now: float) -> bool:
    """The deadline passed: the tree stops with whatever is still running."""
    return now >= drain.deadline


def announce_due(drain: Drain, now: float) -> bool:
    return now - drain.announced >= ANNOUNCE_EVERY_S


def announced(drain: Drain, now: float) -> Drain:
    return replace(drain, announced=now)


def next_deadline(drain: Drain) -> float:
    """When the loop must look again (the next notice or the deadline)."""
    return min(drain.deadline, drain.announced + ANNOUNCE_EVERY_S)
