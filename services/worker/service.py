"""The worker: this node's runners and their models (every node runs one; no leader's code here).

It follows the replicated state (`wire.replica.ReplicaCore`, fed from its one loop), starts
and stops this node's runner processes through the supervisor (`runner_keeper.py`), and makes
sure each runner's model is on this node first: the local models dir, the store's own
directory on the store host, or a staged copy it makes from the store (`staging.py`),
reporting the copy's progress on the bus for the master to replicate. A copy that fails fails
its runner, so the leader's recovery deletes (and, with back-off, re-creates) the instance with
the reason: nothing waits forever.

Staged copies are evicted by one policy (`eviction.py`) on three triggers: a
model no longer used here (an instance's deactivation), start-up (copies orphaned by a crash),
and the operator's purge (a replicated event every worker acts on once). The runners' reports
on the bus become their Prometheus metrics here (`runner_gauges.py`).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq

from skulk.cluster.replica import TOPICS, ReplicaCore, drain_bus, snapshot_request, take_snapshot
from skulk.cluster.state import RunnerKind, RunnerStatus, State
from skulk.node.role_args import WorkerArgs
from skulk.node.staged import LAST_USED, in_use_here, is_staged, model_id_of, staged_copies, store_url
from skulk.services.base import ServiceLoop
from skulk.services.worker import eviction
from skulk.services.worker.decide import eviction_due, plan_staging
from skulk.services.worker.runner_gauges import RunnerGauges
from skulk.services.worker.runner_keeper import RunnerKeeper
from skulk.services.worker.staging import Stager
from skulk.wire import endpoints
from skulk.wire.events import RunnerReport
from skulk.wire.models import dir_name
from skulk.wire.sockets import drain, make_socket, recv_published, send
from skulk.wire.staging import DownloadKind, DownloadReport
from skulk.wire.topics import EVT_DOWNLOAD, EVT_RUNNER

log = logging.getLogger("skulk.worker")
GIB = 1024 ** 3
PURGED = ".skulk-purged"
"""In the staging root: the last operator purge this node carried out (acted on once)."""


class Worker:
    def __init__(self, loop: ServiceLoop, args: WorkerArgs) -> None:
        self.loop, self.args = loop, args
        self.models_dir = loop.rt.args.home / "models"
        self.store = args.store.config(loop.rt.args.home) if args.store else None
        host = args.store is not None and bool(args.store.is_store_host)  # decided by the supervisor
        self.store_path = self.store.store_path if self.store and host else None  # loads straight from it
        staging = self.store.staging if self.store else None
        self.staging = staging.node_cache_path if staging and staging.enabled and not host else None
        self.keep_bytes = int(staging.staging_keep_recent_gb * GIB) if staging else 0
        self.cleanup = bool(staging and staging.cleanup_on_deactivate)
        self.stager = Stager(self.staging) if self.staging else None
        self.replica = ReplicaCore()  # fed from this loop (`setup`): one poll loop per process
        self.keeper = RunnerKeeper(make_socket(loop.ctx, zmq.DEALER,
                                               connect=endpoints.supervisor_control(loop.rt.args.run_dir)),
                                   args.node_id, self.locate, args.listen, args.advertise, self.synced,
                                   self.on_plan)
        self.seen_idx = -1
        self.in_use: set[str] | None = None  # models this node's runners use (None: not known yet)
        self.purged = self._read_purged()  # the last purge acted on, kept across restarts
        self.gauges = RunnerGauges()  # this node's runners as Prometheus metrics

    def synced(self) -> State | None:
        """The state once the local master has a leader's session (its empty boot state would
        stop every runner and evict every copy)."""
        state = self.replica.state
        return state if state is not None and state.session else None

    def locate(self, model_id: str) -> Path | None:
        """Where this node loads `model_id` from, or None while it has no copy."""
        name = dir_name(model_id)
        for root in (self.models_dir, self.store_path, self.staging):
            if root is not None and (root / name / "config.json").is_file() \
                    and (root is not self.staging or is_staged(root / name)):
                return root / name
        return None

    def on_plan(self, running: set[str], missing: list[str], starting: list[str]) -> None:
        state = self.synced()
        if state is None:
            return
        for model_id in starting:  # eviction keeps the newest-used copies
            if self.staging is not None and is_staged(self.staging / dir_name(model_id)):
                (self.staging / dir_name(model_id) / LAST_USED).touch()
        failed = self.stager.failed if self.stager else {}
        decided = plan_staging(state, self.args.node_id, missing, failed, self.stager is not None)
        for model_id in decided.forget:
            assert self.stager is not None, "forget lists the stager's failures: none without one"
            self.stager.retry(model_id)
        for model_id in decided.stage:
            assert self.store is not None and self.stager is not None
            self.stager.want(model_id, store_url(self.store.store_host, self.store.store_http_host,
                                                 self.store.store_port, state, self.args.listen))
        for waiting, why in decided.fail:
            self.fail_runner(waiting.runner_id, waiting.instance_id, why)
        mine = in_use_here(state, self.args.node_id)
        if eviction_due(mine, self.in_use):
            self.evict(mine, purge=False)
        self.in_use = mine
        if state.purge is not None and state.purge.command_id != self.purged:
            self.evict(mine, purge=True, only=state.purge.model_id)
            self._write_purged(state.purge.command_id)

    def on_reports(self, sub: zmq.Socket[Any]) -> None:
        """This node's runners' reports on the bus: their metrics (`runner_gauges.py`)."""
        for _topic, report in drain(sub, recv_published):
            if isinstance(report, RunnerReport):
                self.gauges.on_report(report, self.replica.state)

    def fail_runner(self, runner_id: str, instance_id: str, why: str) -> None:
        """A runner that cannot start, said as its failure: the leader's recovery deletes its
        instance with the reason (and re-creates it with back-off, up to its limit)."""
        self.loop.publish(EVT_RUNNER, RunnerReport(
            runner_id=runner_id, instance_id=instance_id,
            status=RunnerStatus(kind=RunnerKind.FAILED, node_id=self.args.node_id,
                                error_message=f"staging failed: {why}")), suffix=runner_id)

    def tick(self) -> None:
        state = self.synced()
        if state is None:
            return
        if self.stager is not None:
            for progress in self.stager.poll():
                self.loop.publish(EVT_DOWNLOAD, DownloadReport(progress=progress), suffix=progress.model_id)
                if progress.kind in (DownloadKind.COMPLETED, DownloadKind.FAILED):
                    self.keeper.ask()  # start the runner, or fail it with the reason
        if state.last_event_applied_idx != self.seen_idx:
            self.seen_idx = state.last_event_applied_idx
            self.keeper.ask()
            self.gauges.forget_gone(state)
        self.loop.status_detail = (f"staging {sorted(self.stager.running) if self.stager else '-'}; "
                                   f"in use {sorted(self.in_use or ())}")

    def _read_purged(self) -> str:
        try:
            return (self.staging / PURGED).read_text().strip() if self.staging else ""
        except OSError:
            return ""

    def _write_purged(self, command_id: str) -> None:
        self.purged = command_id
        if self.staging is not None:
            self.staging.mkdir(parents=True, exist_ok=True)
            (self.staging / PURGED).write_text(command_id)

    def evict(self, in_use: set[str], purge: bool, only: str = "") -> None:
        """The policy over this node's staged copies (never the store, never the models dir)."""
        if self.staging is None or not self.staging.is_dir() or (not purge and not self.cleanup):
            return
        self._drop_partials(in_use)
        for model_id in eviction.doomed(staged_copies(self.staging), in_use, self.keep_bytes, purge=purge, only=only):
            log.info("evicting the staged copy of %s (%s)", model_id, "purge" if purge else "not in use")
            shutil.rmtree(self.staging / dir_name(model_id), ignore_errors=True)

    def _drop_partials(self, in_use: set[str]) -> None:
        """Half copies of models nobody here wants any more (a crash's leftovers); a failed copy's
        is kept for a re-created instance to resume."""
        assert self.staging is not None
        keep = (self.stager.running | set(self.stager.failed)) if self.stager else set()
        for d in self.staging.iterdir():
            if d.name.endswith(".partial") and d.is_dir():
                model_id = model_id_of(d.name[1:-len(".partial")])
                if model_id not in in_use and model_id not in keep:
                    shutil.rmtree(d, ignore_errors=True)


def setup(loop: ServiceLoop, argv: list[str]) -> None:
    args = WorkerArgs.from_argv(argv)
    worker = Worker(loop, args)
    run = loop.rt.args.run_dir
    sub = make_socket(loop.ctx, zmq.SUB, hwm=100000, connect=endpoints.bus_out(run), subscribe=TOPICS)
    to_master = make_socket(loop.ctx, zmq.DEALER, connect=endpoints.master_local(run))
    reports = make_socket(loop.ctx, zmq.SUB, hwm=100000, connect=endpoints.bus_out(run),
                          subscribe=(EVT_RUNNER.prefix,))
    loop.add_reader(reports, worker.on_reports)

    def ask_snapshot() -> None:
        if worker.replica.snapshot_due(time.monotonic()):
            send(to_master, snapshot_request(), flags=zmq.NOBLOCK)

    def after(read: Callable[[zmq.Socket[Any]], None]) -> Callable[[zmq.Socket[Any]], None]:
        """Read the bus or a snapshot, then act at once on what it changed: a snapshot asked as
        soon as the replica knows it needs one (the leader's first session at boot), the runners
        planned as soon as an instance is placed or deleted (not at the next timer)."""
        def handle(sock: zmq.Socket[Any]) -> None:
            before = worker.replica.state
            read(sock)
            ask_snapshot()
            now = worker.replica.state
            if now is not None and (before is None or now.instances is not before.instances):
                worker.tick()
        return handle

    loop.add_reader(sub, after(lambda s: drain_bus(s, worker.replica)))
    loop.add_reader(to_master, after(lambda s: take_snapshot(s, worker.replica)))
    loop.every(0.5, ask_snapshot, first_in=0.0)
    loop.add_reader(worker.keeper.sup, worker.keeper.on_reply)
    loop.every(0.2, worker.tick, first_in=0.1)
    loop.every(1.0, worker.keeper.ask, first_in=0.1)
    loop.on_stop(worker.stager.stopping.set if worker.stager else (lambda: None))
    log.info("worker: staging into %s; store host %s", worker.staging or "-",
             args.store.store_host if args.store else "-")
