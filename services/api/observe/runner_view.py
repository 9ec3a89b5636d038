"""The API's local view of this node: its runners' latest reports and flight entries, and the
nodes gossip has seen lately (read by `/health`, `/v1/diagnostics/*` and `/admin/clusters`).

Runners publish `RunnerReport`s and `FlightEntry`s on the node's bus; nobody replicates them
(they are diagnostics and load, not state). Each API worker process keeps its own copy here,
fed by one daemon thread with one SUB socket, so a request reads it without asking anyone: a
runner that froze or died mid-request still shows its last report and entries, which is what
the timeline is for. Memory is bounded: a ring of `RING` entries per runner, and a runner
silent for `FORGET_AFTER_S` that is no longer placed on this node is forgotten.

Nodes are remembered from gossip's `Membership` for `REMEMBER_NODE_S` after they were last
live, so a node that was just killed (and is already gone from the replicated state) is still
asked by the cluster views and listed as unreachable instead of silently vanishing.

The root supervisor's notice that the node restarts in place (`ChildLifecycle` of `node`,
`restarting`: sent when its drain begins and every 2 s while it lasts) marks this API process as
the old image's: `/health` says `draining` from then on, until the process ends with the tree.
The replicated mark (`restartingNodes`) would not do: it outlives the restart until the new
image clears it, while the new API already serves.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from skulk.cluster.state import NodeInfo
from skulk.services.api.links import bus_feed
from skulk.wire.cluster import Membership
from skulk.wire.events import ChildLifecycle, LifecycleEvent, RunnerReport
from skulk.wire.flight import FlightEntry
from skulk.wire.topics import EVT_CLUSTER, EVT_FLIGHT, EVT_RUNNER, EVT_SUPERVISOR

log = logging.getLogger("skulk.api.runner_view")

RING = 256
"""Flight entries kept per runner (the runner's own ring is about this size too)."""
FORGET_AFTER_S = 300.0
"""A runner silent this long and no longer placed here is forgotten (it left for good)."""
REMEMBER_NODE_S = 300.0
"""A node gossip stopped listing is still asked (and shown unreachable) for this long."""
PRUNE_EVERY_S = 30.0
MAX_RUNNERS = 64
"""Runners remembered at most (a node runs a handful). The bus is node-local but anything of
the node's user can publish on it: a process sending reports under ever new runner ids grew
this view by hundreds of MiB in a 10-minute fuzz run before the time-based forgetting caught
up. Past the bound, the runner heard from longest ago makes room (a real one is back at its
next report, within a second)."""
MAX_NODES = 1024
NODE = "node"
"""The root supervisor's `ChildLifecycle.child_id` for the whole node (restarting, stopping)."""


@dataclass
class RunnerSeen:
    """What this node last heard from one of its runners (wall-clock times)."""

    runner_id: str
    report: RunnerReport | None = None
    reported_at: float = 0.0
    entries: deque[FlightEntry] = field(default_factory=lambda: deque(maxlen=RING))
    heard_at: float = 0.0
    status_since: float = 0.0  # when the reported status kind last changed

    def copy(self) -> RunnerSeen:
        return RunnerSeen(self.runner_id, self.report, self.reported_at, deque(self.entries, maxlen=RING),
                          self.heard_at, self.status_since)


class RunnerView:
    """Thread-safe records of this node's runners and of the nodes seen live. `on_message` is
    the whole update logic (tests call it directly); `start` feeds it from the bus."""

    def __init__(self, placed: Callable[[], frozenset[str]] = frozenset) -> None:
        self._placed = placed  # runner ids the replicated state places on this node (kept while placed)
        self._lock = threading.Lock()
        self._runners: dict[str, RunnerSeen] = {}
        self._nodes: dict[str, tuple[NodeInfo, float]] = {}
        self._restarting = False  # the node's restart (drain) has begun: this process goes with it
        self._thread: threading.Thread | None = None

    # ---- updates ------------------------------------------------------------------------------
    def on_message(self, msg: object, now: float) -> None:
        """Take one bus message (`now`: wall clock of its receipt)."""
        with self._lock:
            if isinstance(msg, RunnerReport):
                seen = self._runner(msg.runner_id)
                if seen.report is None or seen.report.status.kind != msg.status.kind:
                    seen.status_since = now
                seen.report, seen.reported_at, seen.heard_at = msg, now, now
            elif isinstance(msg, FlightEntry):
                seen = self._runner(msg.runner_id)
                if seen.entries and msg.seq <= seen.entries[-1].seq and msg.pid == seen.entries[-1].pid:
                    return  # a stale duplicate; a new process (other pid) starts its seq again
                seen.entries.append(msg)
                seen.heard_at = now
            elif isinstance(msg, Membership):
                for member in msg.members:
                    if member.info.node_id not in self._nodes and len(self._nodes) >= MAX_NODES:
                        del self._nodes[min(self._nodes, key=lambda n: self._nodes[n][1])]
                    self._nodes[member.info.node_id] = (member.info, now)
            elif isinstance(msg, ChildLifecycle) and msg.child_id == NODE and msg.event == LifecycleEvent.RESTARTING:
                self._restarting = True

    def _runner(self, runner_id: str) -> RunnerSeen:
        """The record of `runner_id`, made if new (the least recently heard makes room past
        `MAX_RUNNERS`); the caller holds the lock."""
        seen = self._runners.get(runner_id)
        if seen is None:
            if len(self._runners) >= MAX_RUNNERS:
                del self._runners[min(self._runners, key=lambda r: self._runners[r].heard_at)]
            seen = self._runners[runner_id] = RunnerSeen(runner_id)
        return seen

    def prune(self, now: float) -> None:
        """Forget runners gone for good and nodes not live for a long while."""
        placed = self._placed()
        with self._lock:
            for rid in [r for r, s in self._runners.items()
                        if now - s.heard_at > FORGET_AFTER_S and r not in placed]:
                del self._runners[rid]
            for nid in [n for n, (_info, at) in self._nodes.items() if now - at > REMEMBER_NODE_S]:
                del self._nodes[nid]

    # ---- reads ----------------------------------------------------------------------------------
    def runners(self) -> dict[str, RunnerSeen]:
        """A copy of every runner's record, by runner id."""
        with self._lock:
            return {rid: seen.copy() for rid, seen in self._runners.items()}

    def restarting(self) -> bool:
        """The node restarts in place (it drains now); never cleared: the new image has a new API."""
        with self._lock:
            return self._restarting

    def nodes(self) -> dict[str, tuple[NodeInfo, float]]:
        """Every node seen live within `REMEMBER_NODE_S`: its last info and when (wall clock)."""
        with self._lock:
            return dict(self._nodes)

    # ---- fed from the bus ----------------------------------------------------------------------
    def start(self, run_dir: Path) -> RunnerView:
        """Follow this node's bus on a daemon thread (`links/bus_feed.py`)."""
        topics = (EVT_RUNNER.prefix, EVT_FLIGHT.prefix, EVT_CLUSTER.prefix, EVT_SUPERVISOR.prefix + NODE.encode())
        self._thread = bus_feed.follow(run_dir, topics, self.on_message, self.prune, PRUNE_EVERY_S, "runner-view")
        return self
