"""Refused frames are logged once per peer, then only counted, with a periodic summary line.

A port that faces other processes (a peer node, a scanner, a fuzzer) must not write one log
line per bad frame: a flood would fill the disk and bury everything else. `Refusals.verdict`
(pure, `now` passed in) decides per refusal: the first from a peer (its routing id, or the
route name where frames carry no sender) is logged with its reason; later ones are counted,
and so are first ones beyond `max_first` per period (a flood of fresh connections); every
`period_s` the counts go out as one summary line. Peers are remembered in a bounded LRU, so
a scanner cycling identities cannot grow the table.

`Refusals.refuse` logs by that verdict; `flush_all(now)` writes the summaries that are due
for every table of the process (the service loop calls it on a timer, so a burst that
stopped is still summarised).
"""

from __future__ import annotations

import logging
import weakref
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from enum import Enum

SUMMARY_PERIOD_S = 60.0
MAX_PEERS = 1024
MAX_FIRST_PER_PERIOD = 20
MAX_REASON_CHARS = 300


class Verdict(Enum):
    LOG = "log"  # the first refusal from this peer: one line with its reason
    COUNT = "count"  # counted into the next summary


@dataclass(eq=False)  # hashable by identity: the process keeps a weak set of its tables
class Refusals:
    """Refusals at one place (`where`: "gossip cluster port", "runner requests", ...)."""

    where: str
    log: logging.Logger
    period_s: float = SUMMARY_PERIOD_S
    max_peers: int = MAX_PEERS
    max_first: int = MAX_FIRST_PER_PERIOD
    peers: OrderedDict[str, None] = field(default_factory=OrderedDict)
    counted: Counter[str] = field(default_factory=Counter)  # reason kind -> refusals since the last summary
    counted_peers: set[str] = field(default_factory=set)
    firsts: int = 0  # first lines logged this period
    period_start: float | None = None
    total: int = 0

    def __post_init__(self) -> None:
        _ALL.add(self)

    def verdict(self, peer: str, kind: str, now: float) -> Verdict:
        """Record one refusal from `peer` (`kind`: the error's class, a typed reason)."""
        if self.period_start is None:
            self.period_start = now
        self.total += 1
        if peer in self.peers:
            self.peers.move_to_end(peer)
        else:
            self.peers[peer] = None
            if len(self.peers) > self.max_peers:
                self.peers.popitem(last=False)
            if self.firsts < self.max_first:
                self.firsts += 1
                return Verdict.LOG
        self.counted[kind] += 1
        if len(self.counted_peers) < self.max_peers:
            self.counted_peers.add(peer)
        return Verdict.COUNT

    def summary(self, now: float) -> str | None:
        """The summary line when a period has passed and something was counted (and resets it)."""
        if self.period_start is None or now - self.period_start < self.period_s:
            return None
        line = None
        if self.counted:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.counted.items()))
            line = (f"{self.where}: {sum(self.counted.values())} more bad frame(s) from "
                    f"{len(self.counted_peers)} peer(s) in the last {now - self.period_start:.0f}s ({kinds})")
        self.counted.clear()
        self.counted_peers.clear()
        self.firsts = 0
        self.period_start = now
        return line

    def refuse(self, peer: str, exc: BaseException, now: float) -> None:
        """Log or count one refused frame."""
        kind = type(exc).__name__
        if self.verdict(peer, kind, now) is Verdict.LOG:
            self.log.warning("%s: rejected a bad frame from %s: %s (further ones from it are only counted)",
                             self.where, peer or "a peer", clip(str(exc)))
        self.flush(now)

    def flush(self, now: float) -> None:
        line = self.summary(now)
        if line:
            self.log.warning("%s", line)


def clip(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """A reason as logged: a stranger's megabyte type name must not become a megabyte line."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def peer_of(envelope: list[bytes]) -> str:
    """A ROUTER envelope's sender as text (its routing id)."""
    return envelope[0].hex() if envelope else ""


_ALL: weakref.WeakSet[Refusals] = weakref.WeakSet()


def flush_all(now: float) -> None:
    """Write the summaries that are due, for every table of this process."""
    for table in list(_ALL):
        table.flush(now)
