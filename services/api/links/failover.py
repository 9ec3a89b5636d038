"""Routing through a change of leader: the request waits for the next leader instead of failing.

A request is routed once, through this node's master to the leader, before anything is sent to
its client. When the leader goes away (its node restarts in place, as every node does in a
rolling restart or a key rotation, or it is lost), the commands in flight fail with the
session-changed error, and those that arrive while the others elect a new leader are held and
then fail too (`services/master/desk.py`). Routing is safe to ask again: nothing has reached the
client, and a task the old leader created belongs to its session, which its successor does not
carry over. So the API asks again, with a new command id, for as long as a failover takes:
noticing the leader gone (up to 3 s), the election (3 s by default), following the winner.
Other commands (placements, deletions) are not retried here: they change the state, and the
old leader may have carried them out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeGuard

from skulk.services.api.links.gateway import Gateway
from skulk.wire.commands import CommandRejected, RejectReason, Reply
from skulk.wire.message import Message

log = logging.getLogger("skulk.api.failover")

LEADER_CHANGE = frozenset({RejectReason.SESSION_CHANGED, RejectReason.NO_LEADER, RejectReason.NOT_LEADER})
"""Refusals that say nothing about the request, only that no leader could take it just now."""
FAILOVER_WAIT_S = 12.0
"""How long a request waits for a new leader before its client gets the 503."""
RETRY_PAUSE_S = 0.2
"""Between two asks: a refusal that comes at once (a follower that is not the leader) must not
become a loop hammering the master for the whole wait."""


def again(reply: Reply, started: float, now: float, budget_s: float = FAILOVER_WAIT_S) -> TypeGuard[CommandRejected]:
    """Whether to route once more (pure): a leader-change refusal, within the budget."""
    return isinstance(reply, CommandRejected) and reply.reason in LEADER_CHANGE and now - started < budget_s


def route(gateway: Gateway, make: Callable[[], Message], clock: Callable[[], float] = time.monotonic,
          pause: Callable[[float], None] = time.sleep) -> Reply:
    """The master's answer to `make()`, asked again (a fresh command each time) while no leader
    could take it. `MasterUnavailable` (this node's master is silent) is the caller's."""
    started = clock()
    while True:
        reply = gateway.command(make())
        if not again(reply, started, clock()):
            return reply
        log.info("routing again: %s (%s); waiting for the next leader", reply.reason, reply.message)
        pause(RETRY_PAUSE_S)
