"""How the event log stays small (pure): what is worth recording, when the active file is
compacted, which archives go, when the disk is too full to write. The defaults (256 MiB ring
keeping 20,000 events, 5 archives within 1 GiB, a 2 GiB free-space floor checked every 1,024
appends) bound the log's disk use; every one is configurable so tests use small ones.
"""

from __future__ import annotations

from typing import TypeAlias

from skulk.cluster.state import NodeGatheredInfo
from skulk.node.role_args import EventlogArgs
from skulk.wire.topics import EVT_SUPERVISOR, STATE_EVENTS, state_event_topic

RECORDED = (STATE_EVENTS, EVT_SUPERVISOR.prefix)
"""State changes (the leader's indexed events, replicated to every node) and process lifecycle.
Not recorded: heartbeats and periodic reports (service status, gossip membership four times a
second, runner load, state heads, catalog and download reports): what they change reaches the
log as state events."""
REFRESHES = (state_event_topic(NodeGatheredInfo),)
"""A node's info is re-sent every 10 s (memory readings): recorded once per node and process."""


Retention: TypeAlias = EventlogArgs
"""The numbers this module decides with are the eventlog role's arguments, declared there."""


def is_refresh(topic: bytes) -> bool:
    return topic.startswith(REFRESHES)


def worth_recording(topic: bytes, seen: set[str], refresh_of: str = "") -> bool:
    """Whether to write an event with this topic; a refresh (`is_refresh`) only the first time
    for `refresh_of` (the node it is about), remembered in `seen`."""
    if not topic.startswith(RECORDED):
        return False
    if is_refresh(topic):
        if refresh_of in seen:
            return False
        seen.add(refresh_of)
    return True


def archives_to_prune(archives: list[tuple[str, int]], keep: Retention) -> list[str]:
    """`archives`: (name, size) oldest first; the oldest go until both caps hold."""
    names = [n for n, _ in archives]
    sizes = [s for _, s in archives]
    out = []
    while names and (len(names) > keep.archives_max or sum(sizes) > keep.archives_bytes):
        out.append(names.pop(0))
        sizes.pop(0)
    return out


def below_floor(free_bytes: int, keep: Retention) -> bool:
    return free_bytes < keep.floor_bytes
