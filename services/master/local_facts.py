"""This node's own facts for the leader: its runners' statuses (from their reports and from
process exits), its copies' download progress (from the worker), its in-place restart. Indexed
at once when this node leads, else sent as a `LocalEvent` (and re-sent until indexed). And the
drain before that restart: once nothing is left in flight here (`drain.py`), the node's
supervisor is told to go on (`drained`). A mixin of `Master`."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import zmq

from skulk.services.master.drain import DrainWait, Pending, pending
from skulk.services.master.failures import process_ended
from skulk.services.master.recovery import runner_failed
from skulk.wire.catalog import CatalogReport, NodeCatalogUpdated, catalog_key
from skulk.wire.cluster import LocalEvent, Membership
from skulk.wire.events import ChildLifecycle, RunnerReport
from skulk.wire.staging import DownloadProgress, DownloadReport, NodeDownloadUpdated
from skulk.wire.sockets import drain, recv_published, send
from skulk.wire.state import RESTART_GRACE_S, NodeRestarting, RunnerStatus, RunnerStatusUpdated

log = logging.getLogger("skulk.master")


class LocalFacts:
    def on_bus(self, sock: zmq.Socket[Any]) -> None:
        for _topic, msg in drain(sock, recv_published):
            if isinstance(msg, RunnerReport):
                self.local_runners[msg.runner_id] = msg.status
                self.runner_fact(msg.runner_id, msg.status)
                if (load := self.loads.on_report(msg, time.monotonic())) and (to := self.leader_sock()):
                    with contextlib.suppress(zmq.Again):  # routing's; resent anyway
                        send(to, load, flags=zmq.NOBLOCK)
            elif isinstance(msg, ChildLifecycle) and (status := process_ended(msg, self.node_id)):
                self.local_runners[msg.child_id] = status
                self.runner_fact(msg.child_id, status)
            elif isinstance(msg, ChildLifecycle) and msg.child_id == "node" and msg.event == "restarting":
                self.restart_announced()
            elif isinstance(msg, ChildLifecycle) and msg.child_id == "node" and msg.event == "stopping" \
                    and self.leaving:  # a stop cut the drain short: the node is not coming back
                self.leaving, self.leaving_until = False, 0.0
                self.local_fact(NodeRestarting(node_id=self.node_id, until=0.0))
            elif isinstance(msg, Membership) and msg.node_id == self.node_id:
                self.membership(msg)
            elif isinstance(msg, DownloadReport):
                self.local_downloads[msg.progress.model_id] = msg.progress
                self.download_fact(msg.progress)
            elif isinstance(msg, CatalogReport):
                entry = NodeCatalogUpdated(node_id=self.node_id, cards=msg.cards, in_store=msg.in_store)
                self.local_catalog[catalog_key(entry)] = entry
                self.catalog_fact(entry)

    def catalog_fact(self, entry: NodeCatalogUpdated) -> None:
        if not self.indexed(entry):
            self.local_fact(entry)

    def download_fact(self, progress: DownloadProgress) -> None:
        event = NodeDownloadUpdated(node_id=self.node_id, progress=progress)
        if not self.indexed(event):
            self.local_fact(event)

    def indexed(self, event: NodeDownloadUpdated | NodeCatalogUpdated) -> bool:
        """Whether the state already says this (a fact re-sent until the leader indexed it)."""
        if isinstance(event, NodeDownloadUpdated):
            return self.state.downloads.get(event.node_id, {}).get(event.progress.model_id) == event.progress
        return self.state.catalog.get(catalog_key(event)) == event

    def runner_fact(self, runner_id: str, status: RunnerStatus) -> None:
        if self.state.runners.get(runner_id) != status:
            self.local_fact(RunnerStatusUpdated(runner_id=runner_id, status=status))

    def local_fact(self, event: RunnerStatusUpdated | NodeRestarting | NodeDownloadUpdated | NodeCatalogUpdated) -> None:
        """A node's own fact (runner status, in-place restart): indexed if we lead, else a `LocalEvent`."""
        if not self.election.is_leader:
            if (sock := self.leader_sock()) is not None:
                send(sock, LocalEvent(node_id=self.node_id, event=event), flags=zmq.NOBLOCK)
            return
        previous = self.state.runners.get(event.runner_id) if isinstance(event, RunnerStatusUpdated) else None
        self.emit([event])
        if isinstance(event, RunnerStatusUpdated) and event.status.kind == "RunnerFailed" \
                and (previous is None or previous.kind != "RunnerFailed"):  # delete, re-create later
            self.emit(runner_failed(self.state, event.runner_id, event.status, time.time(),
                                    self.policy))

    def restart_announced(self) -> None:
        """The supervisor restarts this node in place (it repeats the notice while it drains).
        The leader keeps the node and its instances while gossip does not hear it: for the
        longest drain, then the restart's grace."""
        if self.leaving:
            return
        self.leaving = True
        self.leaving_until = time.time() + self.ns.drain_timeout + RESTART_GRACE_S
        self.drain_waits = Pending(DrainWait.NOT_MARKED)
        log.info("this node restarts in place: asking the leader to mark it restarting")
        self.local_fact(NodeRestarting(node_id=self.node_id, until=self.leaving_until))

    def mark_again(self) -> None:
        """Every second while restarting: the mark again, until the leader has it (a follower's
        `LocalEvent` can be lost, say in an election)."""
        if self.leaving and self.leaving_until and self.node_id not in self.state.restarting:
            self.local_fact(NodeRestarting(node_id=self.node_id, until=self.leaving_until))

    def check_drain(self) -> None:
        """While the restart drains: log what it waits for, and once nothing is left in flight,
        tell the supervisor (once)."""
        if not self.leaving or self.drain_told or self.ns.drain_timeout <= 0:
            return
        waits = pending(self.state, self.node_id, self.loads.loads)
        if waits != self.drain_waits:
            self.drain_waits = waits
            log.info("drain: %s", f"waiting: {waits.reason.value} ({waits.count})" if waits and waits.count
                     else f"waiting: {waits.reason.value}" if waits else "nothing left in flight")
        if waits is None:
            self.drain_told = self.restarter.drained()

    def back_from_restart(self) -> None:
        """The new image clears its node's restart mark (routing and the runner plan wait for it)."""
        if self.node_id in self.state.restarting and not self.leaving:
            self.local_fact(NodeRestarting(node_id=self.node_id, until=0.0))
