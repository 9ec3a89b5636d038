"""The runner's loop: a ROUTER for generate requests, one generation stepped per loop
iteration (heartbeats, cancels and new requests are handled between decode steps), status
reports on the bus.

Boot (load + warmup) happens before ready, under the supervisor's ready deadline
(`SKULK_WARMUP_DEADLINE_SECONDS`). Requests beyond the active one wait in a bounded queue
and get `Progress(queued)` every second; a full queue answers `Failed` at once.
"""

from __future__ import annotations

import argparse
import logging
import random
import time
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any

import zmq

from skulk.services import faults
from skulk.services.base import ServiceLoop
from skulk.services.runner.engine import WEDGED_EXIT, Deadline, MlxEngine, Ring, Session
from skulk.wire.errors import WireError
from skulk.wire.events import RunnerReport
from skulk.wire.inference import Cancel, Failed, Generate, Progress, RankControl, Started
from skulk.wire.sockets import RoutedDecodeError, drain, make_socket, recv_routed, send, send_routed
from skulk.wire.state import RunnerStatus
from skulk.wire.topics import EVT_RUNNER

log = logging.getLogger("skulk.runner")

QUEUE_MAX = 16
REPORT_INTERVAL_S = 2.0
PROGRESS_INTERVAL_S = 1.0


class Runner:
    def __init__(self, loop: ServiceLoop, ns: argparse.Namespace, blas: str | None) -> None:
        self.loop = loop
        self.ns = ns
        self.status = RunnerStatus(kind="RunnerIdle", node_id=ns.node_id)
        hosts = tuple(h for h in ns.hosts.split(",") if h)
        self.ring = Ring(rank=ns.rank, hosts=hosts, sharding=ns.sharding,
                         split=tuple(int(x) for x in ns.split.split(",") if x),
                         hostfile=loop.rt.args.run_dir / f"{ns.runner_id}.hosts.json",
                         connect_deadline_s=ns.group_connect_deadline) if len(hosts) > 1 else None
        self.engine = MlxEngine(Path(ns.model_dir), self.ring)
        self.control: zmq.Socket[Any] | None = None
        if self.ring is not None and ns.rank == 0:
            port = ns.control.rsplit(":", 1)[1]
            self.control = make_socket(loop.ctx, zmq.PUB, hwm=100000, bind=f"tcp://{ns.listen}:{port}")
        self.router = make_socket(loop.ctx, zmq.ROUTER, bind=f"tcp://{ns.listen}:*")
        port = self.router.getsockopt(zmq.LAST_ENDPOINT).decode().rsplit(":", 1)[1]
        self.endpoint = f"tcp://{ns.advertise}:{port}"
        self.queue: deque[tuple[list[bytes], Generate]] = deque()
        self.active: tuple[list[bytes], Session] | None = None
        self.blas = blas

    # ---- status ---------------------------------------------------------------------------
    def report(self, **change: Any) -> None:
        if change:
            self.status = replace(self.status, **change)
        self.loop.publish(EVT_RUNNER, RunnerReport(runner_id=self.ns.runner_id,
                                                   instance_id=self.ns.instance_id,
                                                   status=self.status), suffix=self.ns.runner_id)
        self.loop.status_detail = f"{self.status.kind} {self.ns.model_id}"

    def boot(self) -> None:
        """Load and warm up under SKULK_WARMUP_DEADLINE_SECONDS: a wedge is loud, never silent."""
        with Deadline(self.ns.warmup_deadline, f"runner {self.ns.runner_id} load + warmup of {self.ns.model_id}",
                      "the GPU may be wedged: if this line recurs on this machine, reboot it "
                      "(a wedged Metal/CUDA device is not recovered by restarting processes)",
                      WEDGED_EXIT, self.fail_before_exit):
            self._boot()

    def fail_before_exit(self, message: str) -> None:
        self.report(kind="RunnerFailed", error_message=message)
        self.loop.rt.bus.close(linger=1000)

    def _boot(self) -> None:
        self.report(kind="RunnerLoading", total_layers=self.ns.end_layer - self.ns.start_layer)
        faults.inject("runner", "load")
        t0 = time.monotonic()
        self.engine.load()
        log.info("loaded %s in %.2fs; engine path: %s; BLAS: %s", self.ns.model_id,
                 time.monotonic() - t0, self.engine.path,
                 f"OpenBLAS preloaded ({self.blas})" if self.blas else "mlx bundled (reference) BLAS")
        self.report(kind="RunnerLoaded", layers_loaded=self.status.total_layers)
        self.report(kind="RunnerWarmingUp")
        faults.inject("runner", "warmup")
        self.engine.warmup()
        self.report(kind="RunnerReady", endpoint=self.endpoint)
        log.info("runner %s ready on %s", self.ns.runner_id, self.endpoint)

    # ---- requests -------------------------------------------------------------------------
    def on_request(self, sock: zmq.Socket[Any]) -> None:
        def refuse(exc: WireError) -> None:
            log.warning("runner: bad request frame: %s", exc)
            if isinstance(exc, RoutedDecodeError):
                send_routed(sock, exc.envelope, Failed(request_id="", error=f"bad request: {exc}",
                                                       retryable=False))

        for envelope, msg in drain(sock, recv_routed, limit=100, on_error=refuse):
            if isinstance(msg, Generate):
                self.admit(envelope, msg)
            elif isinstance(msg, Cancel):
                self.cancel(msg.request_id)

    def admit(self, envelope: list[bytes], msg: Generate) -> None:
        if len(self.queue) >= QUEUE_MAX:
            send_routed(self.router, envelope, Failed(
                request_id=msg.request_id, error="runner busy: request queue is full"))
            return
        self.queue.append((envelope, msg))
        if self.active is not None:
            send_routed(self.router, envelope, Progress(request_id=msg.request_id, phase="queued"))

    def cancel(self, request_id: str) -> None:
        if self.active is not None and self.active[1].request_id == request_id:
            log.info("request %s cancelled by its client", request_id)
            self.active[1].stream.close()
            self.active = None
            self.tell_ranks(RankControl(request_id=request_id, action="stop"))
            return
        self.queue = deque((e, m) for e, m in self.queue if m.request_id != request_id)

    # ---- generation, one step per loop iteration -------------------------------------------
    def step(self) -> bool:
        if self.active is None:
            if not self.queue:
                if self.status.kind == "RunnerRunning":
                    self.report(kind="RunnerReady")
                return False
            self.begin(*self.queue.popleft())
            return True
        envelope, session = self.active
        if faults.ENABLED:
            faults.inject("runner", f"decode:{session.seq}")
        self.tell_ranks(RankControl(request_id=session.request_id, action="step"))
        try:
            messages = session.step()
        except Exception as exc:  # an engine error ends this request, not the runner
            log.exception("generation %s failed", session.request_id)
            messages = [Failed(request_id=session.request_id, error=f"{type(exc).__name__}: {exc}")]
            session.done = True
        for m in messages:
            if not send_routed(self.router, envelope, m):
                log.info("client of %s is gone; cancelling", session.request_id)
                session.stream.close()
                session.done = True
                break
        if session.done:
            self.active = None
            self.tell_ranks(RankControl(request_id=session.request_id, action="stop"))
        return True

    def tell_ranks(self, msg: RankControl) -> None:
        if self.control is not None:
            send(self.control, msg)

    def begin(self, envelope: list[bytes], msg: Generate) -> None:
        def on_prefill(done: int, total: int) -> None:
            self.loop.rt.beat()  # long prefills beat from the work itself
            send_routed(self.router, envelope, Progress(request_id=msg.request_id,
                                                        phase="prefill", processed=done, total=total))

        faults.inject("runner", "prefill")
        params = msg.params
        if self.control is not None and params.seed is None:  # every rank must sample alike
            params = replace(params, seed=random.randrange(2 ** 31))
        try:
            prompt = self.engine.prompt_ids(params)
            self.tell_ranks(RankControl(request_id=msg.request_id, action="start",
                                        prompt=tuple(prompt), params=params))
            session = self.engine.start(msg.request_id, params, on_prefill, prompt=prompt)
        except Exception as exc:
            send_routed(self.router, envelope, Failed(request_id=msg.request_id,
                                                      error=f"{type(exc).__name__}: {exc}",
                                                      retryable=False))
            return
        send_routed(self.router, envelope, Started(request_id=msg.request_id,
                                                   prompt_tokens=session.prompt_tokens))
        self.active = (envelope, session)
        if self.status.kind != "RunnerRunning":
            self.report(kind="RunnerRunning")

    def keep_queue_alive(self) -> None:
        for envelope, msg in self.queue:
            send_routed(self.router, envelope, Progress(request_id=msg.request_id, phase="queued"))


class Follower:
    """A rank > 0 of a sharded instance: runs the generate loop rank 0 dictates, step by step."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        host, port = runner.ns.control.rsplit(":", 1)
        self.sub = make_socket(runner.loop.ctx, zmq.SUB, hwm=100000, connect=f"tcp://{host}:{port}",
                               subscribe=(b"",))
        self.session: Session | None = None

    def on_control(self, sock: zmq.Socket[Any]) -> None:
        for msg in drain(sock):
            if not isinstance(msg, RankControl):
                continue
            if msg.action == "start" and msg.params is not None:
                self.session = self.runner.engine.start(msg.request_id, msg.params, lambda *_: None,
                                                        prompt=list(msg.prompt))
                self.runner.report(kind="RunnerRunning")
            elif msg.action == "step" and self.session is not None:
                self.session.step()
                if self.session.done:
                    self.session = None
            elif msg.action == "stop":
                if self.session is not None and not self.session.done:
                    self.session.stream.close()
                self.session = None
                self.runner.report(kind="RunnerReady")


def setup_runner(loop: ServiceLoop, argv: list[str], blas: str | None) -> None:
    p = argparse.ArgumentParser(prog="skulk.services.runner")
    for name in ("--runner-id", "--instance-id", "--node-id", "--model-id", "--model-dir"):
        p.add_argument(name, required=True)
    p.add_argument("--listen", default="127.0.0.1")
    p.add_argument("--advertise", default="127.0.0.1")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--start-layer", type=int, default=0)
    p.add_argument("--end-layer", type=int, default=0)
    p.add_argument("--sharding", default="Pipeline")
    p.add_argument("--hosts", default="")
    p.add_argument("--split", default="")
    p.add_argument("--control", default="")
    p.add_argument("--warmup-deadline", type=float, default=300.0)
    p.add_argument("--group-connect-deadline", type=float, default=120.0)
    ns = p.parse_args(argv)
    runner = Runner(loop, ns, blas)
    try:
        runner.boot()
    except Exception as exc:
        log.exception("runner %s failed to load %s", ns.runner_id, ns.model_id)
        runner.report(kind="RunnerFailed", error_message=f"{type(exc).__name__}: {exc}")
        loop.rt.bus.close(linger=1000)  # let the failure report reach the bus before exit
        raise ValueError(f"load failed: {exc}") from exc
    if runner.ring is not None and ns.rank > 0:
        follower = Follower(runner)
        loop.add_reader(follower.sub, follower.on_control)
    else:
        loop.add_reader(runner.router, runner.on_request)
        loop.set_work(runner.step)
    loop.every(REPORT_INTERVAL_S, runner.report)
    loop.every(PROGRESS_INTERVAL_S, runner.keep_queue_alive)
