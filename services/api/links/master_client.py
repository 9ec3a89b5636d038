"""The API's one client of its node's master: commands, and the named rules for asking again.

Sockets are thread-local (gthread: one socket, one thread). A command uses a REQ with Lazy
Pirate (poll with a deadline, retry once on a fresh socket; the master's replies are idempotent
by command id). Bookkeeping (a task finished or cancelled) is told, never waited for: a client's
answer must not wait on the master, which may be on the node that just died.

Whether a refused command is asked again is a `RetryPolicy`, chosen by what the command does:

- `ONCE`: commands that change the state (deletions, config, tracing, purges, restarts). When
  the leader changes under one, the old leader may have carried it out: the client gets the 503.
- `THROUGH_FAILOVER`: routing a request (a generation, an embedding). Nothing has reached the
  client yet, and a task the old leader created belongs to its session, which its successor does
  not carry over; so it is asked again, with a new command id, for as long as a failover takes:
  noticing the leader gone (up to 3 s), the election (3 s by default), following the winner.
  The commands in flight fail with the session-changed error, and those that arrive while the
  others elect a new leader are held and then fail too (`services/master/desk.py`).
- `WHILE_FORMING`: a placement right after formation, when the state may not list every node
  yet: a too-small topology is info-pending while the cluster forms, never a false 400.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeGuard, cast

import zmq

from skulk.wire import endpoints
from skulk.wire.commands import CommandRejected, RejectReason, Reply
from skulk.wire.errors import WireError
from skulk.wire.message import Message
from skulk.wire.sockets import make_socket, recv, send

log = logging.getLogger("skulk.api.master")

COMMAND_TIMEOUT_S = 5.0
LEADER_CHANGE = frozenset({RejectReason.SESSION_CHANGED, RejectReason.NO_LEADER, RejectReason.NOT_LEADER})
"""Refusals that say nothing about the command, only that no leader could take it just now."""


class MasterUnavailable(RuntimeError):
    """No answer from the master within the command deadline."""


class Commands(Protocol):
    def command(self, cmd: Message, timeout: float = COMMAND_TIMEOUT_S) -> Reply: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Which refusals are asked again, for how long in all, and how long to pause between two
    asks (a refusal that comes at once, from a follower that is not the leader, must not become
    a loop hammering the master)."""

    name: str
    refusals: frozenset[RejectReason]
    budget_s: float
    pause_s: float

    def again(self, reply: Reply, started: float, now: float) -> TypeGuard[CommandRejected]:
        """Whether to ask once more (pure): a refusal of this policy's kind, within the budget."""
        return isinstance(reply, CommandRejected) and reply.reason in self.refusals and now - started < self.budget_s

    def ask(self, master: Commands, make: Callable[[int], Message],
            still: Callable[[CommandRejected], bool] = lambda _reply: True,
            clock: Callable[[], float] = time.monotonic, pause: Callable[[float], None] = time.sleep) -> Reply:
        """The master's answer to `make(attempt)` (a fresh command each time), asked again while
        this policy and `still` say so. `MasterUnavailable` (this node's master is silent) is
        the caller's."""
        started = clock()
        attempt = 0
        while True:
            reply = master.command(make(attempt))
            attempt += 1
            if not (self.again(reply, started, clock()) and still(reply)):
                return reply
            log.info("asking the master again (%s): %s (%s)", self.name, reply.reason, reply.message)
            pause(self.pause_s)


ONCE = RetryPolicy("once", frozenset(), 0.0, 0.0)
THROUGH_FAILOVER = RetryPolicy("through a change of leader", LEADER_CHANGE, budget_s=12.0, pause_s=0.2)
WHILE_FORMING = RetryPolicy("while the cluster forms", frozenset({RejectReason.TOO_FEW_NODES}),
                            budget_s=15.0, pause_s=1.0)


class MasterClient:
    def __init__(self, run_dir: Path, ctx: zmq.Context[Any] | None = None) -> None:
        self.run_dir = run_dir
        self.ctx: zmq.Context[Any] = ctx or zmq.Context.instance()
        self._local = threading.local()

    def command(self, cmd: Message, timeout: float = COMMAND_TIMEOUT_S) -> Reply:
        """The master's reply to one command (a rejection included); asked on a fresh socket once
        more when the first gets no answer in time."""
        for _attempt in range(2):
            sock = getattr(self._local, "req", None)
            if sock is None:
                sock = make_socket(self.ctx, zmq.REQ, connect=endpoints.master_local(self.run_dir))
                self._local.req = sock
            send(sock, cmd)
            if sock.poll(int(timeout * 1000), zmq.POLLIN):
                try:
                    return cast(Reply, recv(sock))  # the master's REP answers every command with a Reply
                except WireError as exc:
                    raise MasterUnavailable(f"bad reply from the master: {exc}") from None
            sock.close(0)  # REQ is stuck after a lost reply: reopen (Lazy Pirate)
            self._local.req = None
        raise MasterUnavailable("the master did not answer in time; please retry")

    def tell(self, cmd: Message) -> None:
        """Send a bookkeeping command (task finished or cancelled) without waiting."""
        sock = getattr(self._local, "teller", None)
        if sock is None:
            sock = make_socket(self.ctx, zmq.DEALER, hwm=1000, connect=endpoints.master_local(self.run_dir))
            self._local.teller = sock
        while sock.poll(0, zmq.POLLIN):  # earlier replies, unread by design
            sock.recv_multipart(zmq.NOBLOCK)
        try:
            send(sock, cmd, flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # the master is away: the task is only bookkeeping once the client has its answer
