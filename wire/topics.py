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

EVERY_EVENT = b"evt."
"""The prefix every topic above shares: a subscription to the whole bus (the tap, tools, tests)."""

STATE_EVENTS = EVT_STATE.prefix + b"event."
"""`EVT_STATE`'s state events, not its heads: the master publishes each under its event's TYPE
(`event.*`, `state_event_topic`) and a head under `head`."""


def state_event_topic(event: type[Message]) -> bytes:
    """The topic one kind of state event is published under."""
    return EVT_STATE.prefix + event.TYPE.encode()
