"""The base of every wire message: a frozen, slotted, keyword-only dataclass.

`TYPE` is the stable wire name (never the Python class name) and `VERSION` is bumped only
by a breaking change; additive fields with defaults keep it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Command(Message):
    """Every command to the master: its id names it in the leader's reply cache (a retry or a
    re-forward is answered the same way, never applied twice)."""

    command_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandReply(Message):
    """Every reply of the master names the command it answers."""

    command_id: str
