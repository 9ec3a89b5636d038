"""The master's command bookkeeping (pure): replies cached by command id, so a retried or
re-forwarded command is answered the same way and never applied twice; and commands held
while no leader answers, each with a deadline."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from skulk.wire.cluster import ForwardableCommand
from skulk.wire.commands import SESSION_CHANGED, CommandRejected, RejectReason, Reply

REPLY_CACHE = 1024
FORWARD_DEADLINE_S = 4.0


@dataclass
class Held:
    envelope: list[bytes] | None  # None: a command of the master itself (--place)
    deadline: float
    command: ForwardableCommand


@dataclass
class CommandDesk:
    replies: OrderedDict[str, Reply] = field(default_factory=OrderedDict)
    held: dict[str, Held] = field(default_factory=dict)

    def cached(self, command_id: str) -> Reply | None:
        return self.replies.get(command_id) if command_id else None

    def remember(self, command_id: str, reply: Reply) -> None:
        if command_id:
            self.replies[command_id] = reply
            while len(self.replies) > REPLY_CACHE:
                self.replies.popitem(last=False)

    def hold(self, command_id: str, envelope: list[bytes] | None, command: ForwardableCommand, now: float) -> None:
        self.held[command_id] = Held(envelope, now + FORWARD_DEADLINE_S, command)

    def expired(self, now: float) -> list[tuple[list[bytes] | None, CommandRejected]]:
        """Held commands past their deadline, removed, each with the 503 to answer."""
        out = []
        for command_id, held in list(self.held.items()):
            if now >= held.deadline:
                del self.held[command_id]
                out.append((held.envelope, CommandRejected(
                    command_id=command_id, status=503, reason=RejectReason.NO_LEADER,
                    message=f"no cluster leader answered within {FORWARD_DEADLINE_S:.0f}s "
                            "(an election may be in progress); please retry")))
        return out

    def session_changed(self) -> list[tuple[list[bytes], CommandRejected]]:
        """The leader went away: the commands held for it fail now with the session-changed
        error (the client retries), as upstream's API does at a failover. The master's own
        commands (`--place`) stay held for the next leader."""
        out = []
        for command_id, held in list(self.held.items()):
            if held.envelope is not None:
                del self.held[command_id]
                out.append((held.envelope, CommandRejected(command_id=command_id, status=503,
                                                           message=SESSION_CHANGED,
                                                           reason=RejectReason.SESSION_CHANGED)))
        return out
