"""The cluster's answers as HTTP errors: the state replica not there yet (503), the master
silent (503), a command the master rejected (its own status)."""

from __future__ import annotations

from skulk.cluster.replica import StateReplica
from skulk.cluster.state import State
from skulk.services.api.http.errors import http_error
from skulk.services.api.links.master_client import Commands, MasterUnavailable
from skulk.wire.commands import CommandRejected, Reply
from skulk.wire.message import Message


def state_or_503(replica: StateReplica, timeout: float = 5.0) -> State:
    state = replica.get(timeout)
    if state is None:
        raise http_error(503, "cluster state is not available yet (the master is starting); retry shortly")
    return state


def master_reply(master: Commands, cmd: Message) -> Reply:
    """The master's reply, a rejection included (the caller decides on its `reason`)."""
    try:
        return master.command(cmd)
    except MasterUnavailable as exc:
        raise http_error(503, str(exc)) from None


def master_accepts(master: Commands, cmd: Message) -> Reply:
    """The master's acceptance; a rejection becomes its HTTP error."""
    reply = master_reply(master, cmd)
    if isinstance(reply, CommandRejected):
        raise http_error(reply.status, reply.message)
    return reply
