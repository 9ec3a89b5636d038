"""Which nodes the leader's state lists, from gossip's membership (pure, clocks passed in):
`NodeGatheredInfo` for new members, for a member whose name changed (a node given no name that
took its derived name) and every 10 s; for members gossip no longer hears,
`TaskFailed(instance_lost)` for their open tasks then `NodeTimedOut`, unless the node announced
an in-place restart (`NodeRestarting`) whose grace has not ended."""

from __future__ import annotations

from dataclasses import dataclass, field

from skulk.cluster.state import Event, NodeGatheredInfo, State
from skulk.services.master.commands import node_lost_events
from skulk.wire.cluster import Member

NODE_INFO_REFRESH_S = 10.0


def lost_nodes(state: State, members: dict[str, Member], wall: float) -> list[str]:
    """Nodes of the state that gossip no longer hears, but for one restarting in place within
    its grace."""
    return [n for n in state.nodes if n not in members and state.restarting.get(n, 0.0) <= wall]


@dataclass
class Roster:
    members: dict[str, Member] = field(default_factory=dict)
    info_sent: dict[str, float] = field(default_factory=dict)

    def events(self, state: State, now: float, wall: float, force: bool = False,
               replace_after_s: float = 0.0) -> list[Event]:
        """The leader's node events for this membership (`now` monotonic, `wall` the clock;
        `replace_after_s`: a lost node's instances are placed again that long after, 0: never)."""
        events: list[Event] = [e for n in lost_nodes(state, self.members, wall)
                               for e in node_lost_events(state, n, wall, replace_after_s)]
        for node_id, member in self.members.items():
            known = state.nodes.get(node_id)
            if force or known is None or known.friendly_name != member.info.friendly_name \
                    or now - self.info_sent.get(node_id, 0) > NODE_INFO_REFRESH_S:
                self.info_sent[node_id] = now
                events.append(NodeGatheredInfo(info=member.info))
        return events
