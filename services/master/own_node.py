"""This node's own facts in the master core: its runners' statuses (from their reports and
from process exits), its copies' download progress (the worker's), its models (the store
role's), its in-place restart and the drain before it. A fact is indexed at once when this
node leads, else sent to the leader as a `LocalEvent` and re-sent until the state has it.
Pure: it only appends effects to the `Turn` it is given. Its restart is one `Restart` value."""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum

from skulk.cluster.catalog import CatalogReport, NodeCatalogUpdated, catalog_key
from skulk.cluster.state import RESTART_GRACE_S, NodeRestarting, RunnerStatus, RunnerStatusUpdated
from skulk.services.master.drain import DrainWait, Pending, pending
from skulk.services.master.effects import TellSupervisor
from skulk.services.master.leader import OwnFact
from skulk.services.master.recovery import process_ended
from skulk.services.master.shared import Shared, Turn
from skulk.wire.cluster import LocalEvent
from skulk.wire.commands import RESTART_PENDING, CommandAccepted, CommandRejected, RejectReason, Reply
from skulk.wire.control import AdminVerb
from skulk.wire.events import ChildLifecycle, LifecycleEvent, RunnerReport
from skulk.wire.message import Message
from skulk.wire.staging import DownloadProgress, DownloadReport, NodeDownloadUpdated

log = logging.getLogger("skulk.master")


class Restart(Enum):
    """Where this node is in an in-place restart (one value, not three flags that could disagree)."""

    NONE = "none"
    ASKED = "asked"  # the supervisor was asked to restart (`POST /admin/restart`); not announced yet
    DRAINING = "draining"  # the supervisor announced it: this process is the old image, draining
    DRAINED = "drained"  # nothing left in flight, and the supervisor was told so

    @property
    def leaving(self) -> bool:
        """This process is the old image of a node that restarts in place."""
        return self in (Restart.DRAINING, Restart.DRAINED)


class OwnNode:
    def __init__(self, shared: Shared, index: Callable[[Turn, OwnFact], None], drain_timeout_s: float) -> None:
        """`index`: how a fact is indexed when this node leads (the leader's `index_fact`: this
        part knows what to say, not who records it)."""
        self.s, self.index, self.drain_timeout_s = shared, index, drain_timeout_s
        self.runners: dict[str, RunnerStatus] = {}
        self.downloads: dict[str, DownloadProgress] = {}
        self.catalog: dict[str, NodeCatalogUpdated] = {}
        self.restart = Restart.NONE  # a second restart while one is under way is a 409
        self.leaving_until = 0.0  # the restart mark's `until` (wall clock)
        self.drain_waits: Pending | None = None  # what the drain last waited for (`drain.py`)

    def on_bus(self, turn: Turn, msg: Message) -> None:
        """A report on this node's bus (membership is the core's)."""
        s = self.s
        if isinstance(msg, RunnerReport):
            self.runners[msg.runner_id] = msg.status
            self.runner_fact(turn, msg.runner_id, msg.status)
            if load := s.loads.on_report(msg, turn.now.mono):
                s.to_leader(turn, load)
        elif isinstance(msg, ChildLifecycle) and (status := process_ended(msg, s.node_id)):
            self.runners[msg.child_id] = status
            self.runner_fact(turn, msg.child_id, status)
        elif isinstance(msg, ChildLifecycle) and msg.child_id == "node" and msg.event == LifecycleEvent.RESTARTING:
            self.restart_announced(turn)
        elif isinstance(msg, ChildLifecycle) and msg.child_id == "node" and msg.event == LifecycleEvent.STOPPING \
                and self.restart.leaving:  # a stop cut the drain short: the node is not coming back
            self.restart, self.leaving_until = Restart.NONE, 0.0
            self.fact(turn, NodeRestarting(node_id=s.node_id, until=0.0))
        elif isinstance(msg, DownloadReport):
            self.downloads[msg.progress.model_id] = msg.progress
            self.download_fact(turn, msg.progress)
        elif isinstance(msg, CatalogReport):
            self.know_catalog(turn, NodeCatalogUpdated(node_id=s.node_id, cards=msg.cards, in_store=msg.in_store))

    def know_catalog(self, turn: Turn, entry: NodeCatalogUpdated) -> None:
        self.catalog[catalog_key(entry)] = entry
        self.catalog_fact(turn, entry)

    def catalog_fact(self, turn: Turn, entry: NodeCatalogUpdated) -> None:
        if not self.indexed(entry):
            self.fact(turn, entry)

    def download_fact(self, turn: Turn, progress: DownloadProgress) -> None:
        event = NodeDownloadUpdated(node_id=self.s.node_id, progress=progress)
        if not self.indexed(event):
            self.fact(turn, event)

    def indexed(self, event: NodeDownloadUpdated | NodeCatalogUpdated) -> bool:
        """Whether the state already says this (a fact re-sent until the leader indexed it)."""
        state = self.s.state
        if isinstance(event, NodeDownloadUpdated):
            return state.downloads.get(event.node_id, {}).get(event.progress.model_id) == event.progress
        return state.catalog.get(catalog_key(event)) == event

    def runner_fact(self, turn: Turn, runner_id: str, status: RunnerStatus) -> None:
        if self.s.state.runners.get(runner_id) != status:
            self.fact(turn, RunnerStatusUpdated(runner_id=runner_id, status=status))

    def fact(self, turn: Turn, event: OwnFact) -> None:
        """Indexed if we lead, else a `LocalEvent` to the leader."""
        s = self.s
        if s.leading:
            self.index(turn, event)
        else:
            s.to_leader(turn, LocalEvent(node_id=s.node_id, event=event))

    def send_all(self, turn: Turn) -> None:
        """Every fact of this node the state lacks (a new leader, or the follower's resend)."""
        for rid, status in self.runners.items():
            self.runner_fact(turn, rid, status)
        for progress in self.downloads.values():
            self.download_fact(turn, progress)
        for entry in self.catalog.values():
            self.catalog_fact(turn, entry)

    def forget_gone_runners(self) -> None:
        live = {r for i in self.s.state.instances.values() for r in i.runner_to_shard}
        self.runners = {r: st for r, st in self.runners.items() if r in live}  # gone with their instance

    def restart_self(self, turn: Turn, command_id: str) -> Reply:
        """`POST /admin/restart` of this node: the supervisor restarts it (once)."""
        if self.restart is not Restart.NONE:
            return CommandRejected(command_id=command_id, status=409, message=RESTART_PENDING,
                                   reason=RejectReason.RESTART_PENDING)
        log.warning("restarting this node in place (asked through the API)")
        turn.out.append(TellSupervisor(AdminVerb.RESTART))
        self.restart = Restart.ASKED
        return CommandAccepted(command_id=command_id, message="restarting")

    def restart_announced(self, turn: Turn) -> None:
        """The supervisor restarts this node in place (it repeats the notice while it drains).
        The leader keeps the node and its instances while gossip does not hear it: for the
        longest drain, then the restart's grace."""
        if self.restart.leaving:
            return
        self.restart = Restart.DRAINING
        self.leaving_until = turn.now.wall + self.drain_timeout_s + RESTART_GRACE_S
        self.drain_waits = Pending(DrainWait.NOT_MARKED)
        log.info("this node restarts in place: asking the leader to mark it restarting")
        self.fact(turn, NodeRestarting(node_id=self.s.node_id, until=self.leaving_until))

    def mark_again(self, turn: Turn) -> None:
        """Every second while restarting: the mark again, until the leader has it (a follower's
        `LocalEvent` can be lost, say in an election)."""
        if self.restart.leaving and self.leaving_until and self.s.node_id not in self.s.state.restarting:
            self.fact(turn, NodeRestarting(node_id=self.s.node_id, until=self.leaving_until))

    def check_drain(self, turn: Turn) -> None:
        """While the restart drains: log what it waits for, and once nothing is left in flight,
        tell the supervisor (once)."""
        if self.restart is not Restart.DRAINING or self.drain_timeout_s <= 0:
            return
        waits = pending(self.s.state, self.s.node_id, self.s.loads.loads)
        if waits != self.drain_waits:
            self.drain_waits = waits
            log.info("drain: %s", f"waiting: {waits.reason.value} ({waits.count})" if waits and waits.count
                     else f"waiting: {waits.reason.value}" if waits else "nothing left in flight")
        if waits is None:
            turn.out.append(TellSupervisor(AdminVerb.DRAINED))
            self.restart = Restart.DRAINED

    def supervisor_missed(self, verb: AdminVerb) -> None:
        """The supervisor could not take `verb`: `drained` is told again at the next tick; a
        restart is forgotten (the operator's next request asks again, not a 409)."""
        if verb is AdminVerb.DRAINED:
            if self.restart is Restart.DRAINED:
                self.restart = Restart.DRAINING
        elif self.restart is Restart.ASKED:
            log.warning("could not ask this node's supervisor to restart (its queue is full); not restarting")
            self.restart = Restart.NONE

    def back_from_restart(self, turn: Turn) -> None:
        """The new image clears its node's restart mark (routing and the runner plan wait for it)."""
        if self.s.node_id in self.s.state.restarting and not self.restart.leaving:
            self.fact(turn, NodeRestarting(node_id=self.s.node_id, until=0.0))

