"""A process's replica of the state (`cluster/replica.py`, the logic without sockets): when it
asks its master for a snapshot."""

from __future__ import annotations

from skulk.cluster.replica import SNAPSHOT_RETRY_S, ReplicaCore
from skulk.cluster.state import State, StateHead


def test_it_asks_at_start_and_again_only_after_the_retry_time():
    core = ReplicaCore()
    assert core.snapshot_due(0.0)
    assert not core.snapshot_due(SNAPSHOT_RETRY_S - 0.1)  # the master (booting) did not answer
    assert core.snapshot_due(SNAPSHOT_RETRY_S + 0.1)


def test_a_master_that_had_no_session_is_asked_again_as_soon_as_it_has_one():
    """A cluster forming: the master answers nothing before it leads or follows; its first
    head on the bus says it has a state now (the replica asks at once, not 2 s later)."""
    core = ReplicaCore()
    assert core.snapshot_due(0.0)
    core.on_bus(StateHead(idx=0, session="2-a"))
    assert core.snapshot_due(0.1)
    core.on_snapshot(State(session="2-a"))
    assert core.state is not None and not core.snapshot_due(0.2)
