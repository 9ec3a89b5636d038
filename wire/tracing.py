"""Cluster-wide tracing switch: replicated state, so every node and every future leader agree.

`PUT /v1/tracing` sends `SetTracing` to the node's master (forwarded to the leader); the
leader indexes `TracingSet`, every replica applies it (`State.tracing_enabled`). The leader
stamps the flag on each task it creates (`Task.trace`, `Routed.trace`), so a switch affects
new requests only; the API passes it to the runner (`Generate.trace`) and rank 0 to the other
ranks (`RankInsert.trace_task`). A new cluster's first leader starts from the config's
`tracing.enabled` (`SKULK_TRACING_ENABLED`); later leaders carry the replicated flag over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from skulk.wire.message import Command, Message


@dataclass(frozen=True, slots=True, kw_only=True)
class SetTracing(Command):
    """API -> its master (-> the leader): switch tracing for new requests."""

    TYPE: ClassVar[str] = "command.set_tracing"
    enabled: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class TracingSet(Message):
    TYPE: ClassVar[str] = "event.tracing_set"
    enabled: bool
