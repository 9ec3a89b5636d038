"""Bus topics, each declared with the message types it may carry.

A PUB frame is `[topic, payload]`; the topic is `prefix + suffix` (the suffix names the
publisher, e.g. `evt.service.gossip`), so subscribers filter by prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from skulk.cluster.catalog import CatalogReport
from skulk.cluster.state import IndexedEvent, StateHead
from skulk.wire.cluster import Membership
from skulk.wire.events import ChildLifecycle, RunnerReport, ServiceStatus
from skulk.wire.flight import FlightEntry
from skulk.wire.message import Message
from skulk.wire.staging import DownloadReport


@dataclass(frozen=True, slots=True)
class Topic:
    prefix: bytes
    carries: tuple[type[Message], ...]

    def allows(self, msg: Message) -> bool:
        return isinstance(msg, self.carries)


EVT_SERVICE = Topic(b"evt.service.", (ServiceStatus,))
EVT_SUPERVISOR = Topic(b"evt.supervisor.", (ChildLifecycle,))

EVT_RUNNER = Topic(b"evt.runner.", (RunnerReport,))
EVT_FLIGHT = Topic(b"evt.flight.", (FlightEntry,))
EVT_STATE = Topic(b"evt.state.", (IndexedEvent, StateHead))
EVT_CLUSTER = Topic(b"evt.cluster.", (Membership,))
EVT_DOWNLOAD = Topic(b"evt.download.", (DownloadReport,))
EVT_CATALOG = Topic(b"evt.catalog.", (CatalogReport,))

ALL_TOPICS: tuple[Topic, ...] = (EVT_SERVICE, EVT_SUPERVISOR, EVT_RUNNER, EVT_STATE, EVT_CLUSTER, EVT_DOWNLOAD,
                                 EVT_CATALOG, EVT_FLIGHT)
