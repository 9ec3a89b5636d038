"""The worker: this node's runners and their models (every node runs one; no leader's code here).

It follows the replicated state (the same replica the API uses), starts and stops this node's
runner processes through the supervisor (`runner_keeper.py`), and makes sure each runner's
model is on this node first: the local models dir, the store's own directory on the store host,
or a staged copy it makes from the store (`staging.py`), reporting the copy's progress on the
bus for the master to replicate. A copy that fails fails its runner, so the leader's recovery
deletes (and, with back-off, re-creates) the instance with the reason: nothing waits forever.

Staged copies are evicted by one policy (`eviction.py`) on the runbook's three triggers: a
model no longer used here (an instance's deactivation), start-up (copies orphaned by a crash),
and the operator's purge (a replicated event every worker acts on once).
"""

from __future__ import annotations

import argparse
import logging
import shutil
from pathlib import Path

import zmq

from skulk.services.api.replica import StateReplica
from skulk.services.base import ServiceLoop
from skulk.services.worker import eviction
from skulk.services.store.locate import store_url
from skulk.supervisor.model_store import add_store_arguments, is_store_host, store_from_args
from skulk.services.worker.runner_keeper import RunnerKeeper
from skulk.services.worker.staging import LAST_USED, Stager, is_staged, staged_copies
from skulk.wire import endpoints
from skulk.wire.events import RunnerReport
from skulk.wire.models import dir_name
from skulk.wire.sockets import make_socket
from skulk.wire.staging import DownloadKind, DownloadReport
from skulk.wire.state import RunnerStatus, State
from skulk.wire.topics import EVT_DOWNLOAD, EVT_RUNNER

log = logging.getLogger("skulk.worker")
GIB = 1024 ** 3


class Worker:
    def __init__(self, loop: ServiceLoop, ns: argparse.Namespace) -> None:
        self.loop, self.ns = loop, ns
        self.models_dir = loop.rt.args.home / "models"
        self.store = store_from_args(ns, loop.rt.args.home)
        host = self.store is not None and is_store_host(self.store, ns.node_name, ns.node_id)
        self.store_path = self.store.store_path if self.store and host else None  # loads straight from it
        staging = self.store.staging if self.store else None
        self.staging = staging.node_cache_path if staging and staging.enabled and not host else None
        self.keep_bytes = int(staging.staging_keep_recent_gb * GIB) if staging else 0
        self.cleanup = bool(staging and staging.cleanup_on_deactivate)
        self.stager = Stager(self.staging) if self.staging else None
        self.replica = StateReplica(loop.rt.args.run_dir)
        self.keeper = RunnerKeeper(make_socket(loop.ctx, zmq.DEALER,
                                               connect=endpoints.supervisor_control(loop.rt.args.run_dir)),
                                   ns.node_id, self.locate, ns.listen, ns.advertise,
                                   lambda: self.replica.get(timeout=0), self.on_plan)
        self.seen_idx = -1
        self.in_use: set[str] | None = None  # models this node's runners use (None: not known yet)
        self.purged = ""  # the last purge command acted on

    def locate(self, model_id: str) -> Path | None:
        """Where this node loads `model_id` from, or None while it has no copy."""
        name = dir_name(model_id)
        for root in (self.models_dir, self.store_path):
            if root is not None and (root / name / "config.json").is_file():
                return root / name
        if self.staging is not None and is_staged(self.staging / name):
            (self.staging / name / LAST_USED).touch()
            return self.staging / name
        return None

    def on_plan(self, running: set[str], missing: list[str]) -> None:
        state = self.replica.get(timeout=0)
        if state is None:
            return
        for model_id in missing:
            self.stage(state, model_id)
        mine = {inst.model_id for inst in state.instances.values() if self.ns.node_id in inst.node_to_runner}
        if self.in_use is None or not mine >= self.in_use:  # start-up, or a model left this node
            self.evict(eviction.in_use(mine, {}), purge=False)
        self.in_use = mine
        if state.purge is not None and state.purge.command_id != self.purged:
            self.purged = state.purge.command_id
            self.evict(eviction.in_use(mine, {}), purge=True, only=state.purge.model_id)

    def stage(self, state: State, model_id: str) -> None:
        if self.stager is None:  # no store: the model must be in the models dir
            self.fail_runners(state, model_id, f"{model_id} is not in {self.models_dir} and no model "
                                               "store is configured (model_store in skulk.yaml)")
            return
        self.stager.want(model_id, self.store_url(state))

    def store_url(self, state: State) -> str:
        assert self.store is not None
        return store_url(self.store, state, self.ns.advertise)

    def fail_runners(self, state: State, model_id: str, why: str) -> None:
        """This node's runners of `model_id` cannot start: said as their failure, so the leader's
        recovery deletes the instance with the reason (and re-creates it with back-off)."""
        for inst in state.instances.values():
            rid = inst.node_to_runner.get(self.ns.node_id)
            if inst.model_id == model_id and rid is not None and rid not in state.runners:
                self.loop.publish(EVT_RUNNER, RunnerReport(
                    runner_id=rid, instance_id=inst.instance_id,
                    status=RunnerStatus(kind="RunnerFailed", node_id=self.ns.node_id,
                                        error_message=f"staging failed: {why}")), suffix=rid)

    def tick(self) -> None:
        state = self.replica.get(timeout=0)
        if state is None:
            return
        if self.stager is not None:
            for progress in self.stager.poll():
                self.loop.publish(EVT_DOWNLOAD, DownloadReport(progress=progress), suffix=progress.model_id)
                if progress.kind == DownloadKind.FAILED:
                    self.fail_runners(state, progress.model_id, progress.error_message)
                if progress.kind in (DownloadKind.COMPLETED, DownloadKind.FAILED):
                    self.keeper.ask()
        if state.last_event_applied_idx != self.seen_idx:
            self.seen_idx = state.last_event_applied_idx
            if self.stager is not None:  # a re-created instance retries a failed copy
                for model_id in list(self.stager.failed):
                    if not any(i.model_id == model_id for i in state.instances.values()):
                        self.stager.retry(model_id)
            self.keeper.ask()
        self.loop.status_detail = (f"staging {sorted(self.stager.running) if self.stager else '-'}; "
                                   f"in use {sorted(self.in_use or ())}")

    def evict(self, in_use: set[str], purge: bool, only: str = "") -> None:
        """The policy over this node's staged copies (never the store, never the models dir)."""
        if self.staging is None or not self.staging.is_dir() or (not purge and not self.cleanup):
            return
        self._drop_partials(in_use)
        for model_id in eviction.doomed(staged_copies(self.staging), in_use, self.keep_bytes, purge=purge, only=only):
            log.info("evicting the staged copy of %s (%s)", model_id, "purge" if purge else "not in use")
            shutil.rmtree(self.staging / dir_name(model_id), ignore_errors=True)

    def _drop_partials(self, in_use: set[str]) -> None:
        """Half copies of models nobody here wants any more (a crash's leftovers)."""
        assert self.staging is not None
        copying = self.stager.running if self.stager else set()
        for d in self.staging.iterdir():
            if d.name.endswith(".partial") and d.is_dir():
                model_id = d.name[1:-len(".partial")].replace("--", "/", 1)
                if model_id not in in_use and model_id not in copying:
                    shutil.rmtree(d, ignore_errors=True)


def setup(loop: ServiceLoop, argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="skulk.services.worker")
    p.add_argument("--node-id", required=True)
    p.add_argument("--node-name", default="")
    p.add_argument("--listen", default="0.0.0.0")
    add_store_arguments(p)  # none given: no store, models come from the models dir
    ns = p.parse_args(argv)
    ns.advertise = "127.0.0.1" if ns.listen in ("0.0.0.0", "::", "") else ns.listen
    worker = Worker(loop, ns)
    loop.add_reader(worker.keeper.sup, worker.keeper.on_reply)
    loop.every(0.2, worker.tick, first_in=0.1)
    loop.every(1.0, worker.keeper.ask, first_in=0.1)
    loop.on_stop(worker.stager.stopping.set if worker.stager else (lambda: None))
    log.info("worker: staging into %s; store host %s", worker.staging or "-", ns.store_host or "-")
