"""Staging and the model store on the wire: download progress (a node's own fact, replicated so
`/state` shows every node's copies), and the operator's purge, broadcast as an event so every
node's worker acts on it (and a node that was away acts on it when it catches up)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from skulk.wire.message import Command, Message


class DownloadKind(StrEnum):
    """Upstream's download states (the tag in `/state`)."""

    PENDING = "DownloadPending"
    ONGOING = "DownloadOngoing"
    COMPLETED = "DownloadCompleted"
    FAILED = "DownloadFailed"


@dataclass(frozen=True, slots=True, kw_only=True)
class DownloadProgress(Message):
    """One model's copy on one node: from the store into its staging root."""

    TYPE: ClassVar[str] = "state.download_progress"
    model_id: str
    kind: str  # a DownloadKind
    done_bytes: int = 0
    total_bytes: int = 0
    rate_bps: float = 0.0
    error_message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class DownloadReport(Message):
    """Worker -> its node's master, on the bus: a copy's progress changed."""

    TYPE: ClassVar[str] = "event.download_report"
    progress: DownloadProgress


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeDownloadUpdated(Message):
    """Replicated: a node's copy of a model is pending, ongoing, done or failed."""

    TYPE: ClassVar[str] = "event.node_download_updated"
    node_id: str
    progress: DownloadProgress


@dataclass(frozen=True, slots=True, kw_only=True)
class PurgeStaging(Command):
    """`POST /store/purge-staging`: remove staged copies nobody uses, on every node."""

    TYPE: ClassVar[str] = "command.purge_staging"
    model_id: str = ""  # "" for every model


@dataclass(frozen=True, slots=True, kw_only=True)
class StagingPurged(Message):
    """Replicated: the operator asked every node to purge (`model_id` "" for all); each node's
    worker purges once per `command_id`."""

    TYPE: ClassVar[str] = "event.staging_purged"
    command_id: str
    model_id: str = ""
