"""Node names are unique in a cluster (pure decisions; the gossip service acts on them).

A node's name is how an operator and the config (`model_store.store_host`, `node_overrides`)
point at a node, and what `/state` shows as its `friendlyName`: two live nodes with one name
would make all of these ambiguous. Names compare without case. Of two live nodes with one
name, the one started later (ties: the larger node id) must not be part of the cluster:

- it hears the other directly -> a node given no name (called by its host name) takes its
  derived name (`node/node_identity.py`) and is judged again under it; a node whose name
  was given refuses to join: an ERROR, and it stays a cluster of one until it is restarted
  with another name (it cannot tell the operator's mistake from a rename in progress, so it
  does not retry);
- a node that hears it while the name is held by itself or by a member it admitted ignores it
  (it is never admitted) and dials it, so that it hears the holder and refuses;
- a node that admitted the later one first and then hears the earlier one drops the later
  one and admits the earlier one: every node settles on the same holder.

A node restarted with a new node id under its old name, while its peers still count the
old id as a member (up to the peer timeout), is ignored by them until the old id expires, then
admitted: it never hears the old id (that process is gone), so it does not refuse.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from skulk.node.model_store import same_name


@dataclass(frozen=True, slots=True)
class Named:
    """A node as names are judged: who, under which name, since when (epoch seconds)."""

    node_id: str
    name: str
    started: float


class Clash(enum.Enum):
    NONE = "none"
    REFUSE_SELF = "refuse_self"  # the sender holds my name and started first: I must not join
    TAKE_DERIVED = "take_derived"  # as REFUSE_SELF, but I was given no name: I go by my derived one
    IGNORE_SENDER = "ignore_sender"  # its name is held by me or a member that started first
    DROP_MEMBER = "drop_member"  # it started before the member holding its name: that member goes


@dataclass(frozen=True, slots=True)
class Decision:
    clash: Clash
    other: Named | None = None  # the node that holds the same name (None when no clash)


def later(a: Named, b: Named) -> bool:
    """`a` started after `b` (a total order: equal start times fall back to the node id)."""
    return (a.started, a.node_id) > (b.started, b.node_id)


def judge(me: Named, members: Iterable[Named], sender: Named, derived: str = "") -> Decision:
    """What to do with a hello from `sender`, given this node, the members it admitted and, for
    a node given no name, the derived name it may take ("" for a node whose name was given)."""
    if sender.node_id == me.node_id:
        return Decision(Clash.NONE)
    if same_name(sender.name, me.name):
        if not later(me, sender):
            return Decision(Clash.IGNORE_SENDER, me)
        if derived and not same_name(me.name, derived) and not same_name(sender.name, derived):
            return Decision(Clash.TAKE_DERIVED, sender)
        return Decision(Clash.REFUSE_SELF, sender)
    for member in members:
        if member.node_id != sender.node_id and same_name(member.name, sender.name):
            if later(sender, member):
                return Decision(Clash.IGNORE_SENDER, member)
            return Decision(Clash.DROP_MEMBER, member)
    return Decision(Clash.NONE)
