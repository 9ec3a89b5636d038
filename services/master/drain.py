"""Whether this node, draining before an in-place restart, has nothing left in flight (pure).

The root supervisor keeps the tree running until this node's master says `drained`
(`supervisor/drain.py`). The master decides from what it knows without asking anyone:

1. The leader has recorded the restart (`NodeRestarting` is in the replicated state this master
   applied). Before that, routing may still send requests here, so the drain has not begun.
   The leader indexes a request's task before it answers the route, so once the mark is in, every
   request routed here is in the state too, and no new one comes.
2. No open task is routed to an instance with a rank on this node (the stream is still running:
   the API ends its task once the client has its outcome).
3. No open task is owned by this node's API (a stream it relays from another node's instance:
   stopping the API would cut it).
4. Every runner of this node reports an empty batch and queue (the runner's own word, which also
   covers what has no task: an embedding request, a task lost in a leader change).

Each reason is typed; the master logs which one it waits for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from skulk.cluster.state import OPEN_STATUSES, State


class DrainWait(Enum):
    """What a drain waits for (the value is for the log)."""

    NOT_MARKED = "the leader has not recorded the restart yet"
    ROUTED = "requests still running on this node's instances"
    RELAYED = "streams this node's API still relays"
    RUNNERS = "runners of this node still report requests"


@dataclass(frozen=True, slots=True)
class Pending:
    """What the drain still waits for, and how many of them."""

    reason: DrainWait
    count: int = 0


def pending(state: State, node_id: str, loads: Mapping[str, int]) -> Pending | None:
    """None once the node has drained; `loads`: requests in batch + queue per runner, as its
    runners last reported them on this node's bus."""
    if node_id not in state.restarting:
        return Pending(DrainWait.NOT_MARKED)
    ours = {iid: inst.node_to_runner[node_id] for iid, inst in state.instances.items()
            if node_id in inst.node_to_runner}
    open_tasks = [t for t in state.tasks.values() if t.status in OPEN_STATUSES]
    if routed := sum(1 for t in open_tasks if t.instance_id in ours):
        return Pending(DrainWait.ROUTED, routed)
    if relayed := sum(1 for t in open_tasks if t.owner_node == node_id):
        return Pending(DrainWait.RELAYED, relayed)
    if busy := sum(1 for rid in ours.values() if loads.get(rid, 0) > 0):
        return Pending(DrainWait.RUNNERS, busy)
    return None
