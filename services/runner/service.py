"""The runner's loop: one process per (instance, rank), one poll loop, one running batch.

Rank 0 serves generate requests on a ROUTER (from API DEALERs): each is admitted at once
(`Started`) or refused at once (`Failed`: busy, context), then joins the batch at the next
step. Each loop iteration runs one batch step (`Batcher`), so heartbeats, cancels and new
requests are handled between steps; a sharded instance's rank 0 hands each step's decisions to
the other ranks first (`lockstep`), and they apply them in the same order.

Boot (load + warmup) happens before ready, under the supervisor's ready deadline
(`SKULK_WARMUP_DEADLINE_SECONDS`). The load (requests in the batch and waiting) goes to the
master on the bus in `RunnerReport`, off the replicated state: busy and idle are not events.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import zmq

from skulk.cluster.engines import kind_of
from skulk.cluster.state import RunnerKind, RunnerStatus
from skulk.node import exitcodes
from skulk.node.model_cards import drafter_of
from skulk.node.role_args import RunnerArgs
from skulk.node.trace_files import now_us
from skulk.services import faults
from skulk.services.base import BootRefused, ServiceLoop
from skulk.services.runner import embed_engine, lockstep
from skulk.services.runner.batch_engine import MlxBatchEngine
from skulk.services.runner.batcher import Batcher, Out, follow
from skulk.services.runner.deadline import Deadline, StepBeats
from skulk.services.runner.engine import Engine, EngineRefused
from skulk.services.runner.flight import Ident
from skulk.services.runner.observe import Observer
from skulk.services.runner.quant_path import QuantMode
from skulk.services.runner.ring import Ring, use_device
from skulk.services.runner.scheduler import Limits
from skulk.services.runner.speculate import SpecMode, SpecSettings
from skulk.services.runner.tracing import RankTraces
from skulk.wire import endpoints
from skulk.wire.errors import WireError
from skulk.wire.events import RunnerReport
from skulk.wire.flight import FlightEntry, Phase
from skulk.wire.inference import Cancel, Done, Embed, Failed, FailReason, Generate, Started
from skulk.wire.models import EngineKind
from skulk.wire.refusals import Refusals, peer_of
from skulk.wire.sockets import BusPublisher, RoutedDecodeError, drain, make_socket, recv_routed, send_routed
from skulk.wire.topics import EVT_FLIGHT, EVT_RUNNER

log = logging.getLogger("skulk.runner")
REFUSALS = Refusals("runner: requests", log)

REPORT_INTERVAL_S = 2.0
LOAD_REPORT_MIN_S = 0.05
"""A load change is reported at once, but not more often than this (many joins in one burst)."""
PROGRESS_INTERVAL_S = 1.0


class Runner:
    def __init__(self, loop: ServiceLoop, args: RunnerArgs, blas: str | None,
                 engine: Engine | None = None) -> None:
        self.loop = loop
        place, settings = args.placement, args.settings
        self.place, self.settings = place, settings
        self.status = RunnerStatus(kind=RunnerKind.IDLE, node_id=place.node_id)
        hosts = place.hosts
        self.ring = Ring(rank=place.rank, hosts=hosts, sharding=place.sharding, split=place.split,
                         hostfile=loop.rt.args.run_dir / f"{place.runner_id}.hosts.json",
                         connect_deadline_s=settings.group_connect_deadline) if len(hosts) > 1 else None
        # An embedding model's runner serves `Embed` only (embed_engine.py), never sharded.
        self.embedder = (embed_engine.for_model(place.model_dir, place.model_id, settings.queue_max, place.embedding,
                                                kind_of(place.engine), settings.threads)
                         if engine is None and self.ring is None else None)
        if self.embedder is not None:  # the boot needs only its load, warmup and path
            # Only its load, warmup, path and active() are used (its Batcher stays empty): not a full Engine.
            engine = cast(Engine, self.embedder.engine)
        self.engine: Engine = engine or make_engine(args, self.ring)
        traces = RankTraces(loop.rt.args.home, place.node_id, "", place.model_id, place.rank)
        self.batcher = Batcher(self.engine, Limits(max_batch=settings.max_batch, queue_max=settings.queue_max),
                               traces=traces)
        sharded = self.ring is not None
        # The stall watch publishes and beats from its own thread, so on its own sockets.
        stall_sock = BusPublisher(loop.ctx, endpoints.bus_in(loop.rt.args.run_dir), hwm=100)
        self.step_beats = StepBeats(loop.ctx, loop.rt.args.run_dir, loop.rt.args.child_id)
        self.observer = Observer(
            Ident(place.runner_id, place.instance_id, place.model_id, place.node_id, place.rank, max(1, len(hosts))),
            traces,
            self.publish_entry, lambda e: stall_sock.publish(EVT_FLIGHT, e, place.runner_id), sharded,
            self.step_beats.send)
        self.stall_sock = stall_sock
        self.leader: lockstep.Leader | None = None
        self.follower: lockstep.Follower | None = None
        if self.ring is not None and place.rank == 0:
            self.leader = lockstep.Leader(loop.ctx, place.listen, place.control.rsplit(":", 1)[1], len(hosts) - 1)
        elif self.ring is not None:
            self.follower = lockstep.Follower(loop.ctx, place.control, place.rank)
        self.router = make_socket(loop.ctx, zmq.ROUTER, hwm=100000, bind=f"tcp://{place.listen}:*")
        port = self.router.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1]
        self.endpoint = f"tcp://{place.advertise}:{port}"
        self.blas = blas
        self.reported_load = (-1, -1)
        self.load_reported_at = 0.0

    # ---- status ---------------------------------------------------------------------------
    def shutdown(self) -> None:
        self.observer.shutdown()
        self.stall_sock.close()  # its thread has ended
        self.step_beats.close()

    def publish_entry(self, entry: FlightEntry) -> None:
        self.loop.publish(EVT_FLIGHT, entry, suffix=self.place.runner_id)

    def report(self, **change: Any) -> None:
        if change:
            self.status = replace(self.status, **change)
        active, waiting = self.load()
        self.reported_load, self.load_reported_at = (active, waiting), time.monotonic()
        total = self.batcher.tokens_total
        self.loop.publish(EVT_RUNNER, RunnerReport(
            runner_id=self.place.runner_id, instance_id=self.place.instance_id, status=self.status, active=active,
            waiting=waiting, phase=self.observer.recorder.phase, tok_s=round(self.observer.rate(total), 2),
            pid=os.getpid(), tokens_total=total, step_cpu_s=round(self.batcher.step_cpu_s, 4),
            step_wall_s=round(self.batcher.step_wall_s, 4)), suffix=self.place.runner_id)
        self.loop.status_detail = (f"{self.status.kind} {self.place.model_id} on {self.place.engine} "
                                   f"batch {active} waiting {waiting}")

    def load(self) -> tuple[int, int]:
        """Requests running and waiting (generation batch, or embedding queue)."""
        return self.embedder.load if self.embedder else (len(self.batcher.running), len(self.batcher.waiting))

    def report_load_change(self) -> None:
        load = self.load()
        if load != self.reported_load and time.monotonic() - self.load_reported_at >= LOAD_REPORT_MIN_S:
            self.report()

    def boot(self) -> None:
        """Load and warm up under SKULK_WARMUP_DEADLINE_SECONDS: a wedge is loud, never silent."""
        what = f"runner {self.place.runner_id} load + warmup of {self.place.model_id}"
        with Deadline(self.settings.warmup_deadline, what,
                      "the GPU may be wedged: if this line recurs on this machine, reboot it "
                      "(a wedged Metal/CUDA device is not recovered by restarting processes)",
                      exitcodes.WEDGED, self.fail_before_exit):
            self._boot()

    def fail_before_exit(self, message: str, exit_code: int) -> None:
        # The exit is `exit_code` from here: the report makes the leader delete the instance and
        # the supervisor stop this runner, and that SIGTERM, if it came before the exit, would
        # end the boot as a clean stop (exit 0 instead of a wedge's 86, seen on a slow machine).
        self.loop.booting = False
        self.report(kind=RunnerKind.FAILED, error_message=message, exit_code=exit_code)
        self.loop.rt.bus.close(linger=1000)
        faults.inject("runner", "failed")

    def _boot(self) -> None:
        self.report(kind=RunnerKind.LOADING, total_layers=self.place.end_layer - self.place.start_layer)
        faults.inject("runner", "load")
        t0 = time.monotonic()
        if self.ring is not None:
            self.observer.enter(Phase.CONNECT_GROUP, f"{self.ring.sharding} over {len(self.ring.hosts)} hosts")
        self.observer.enter(Phase.LOAD_MODEL, self.place.model_id)
        if isinstance(self.engine, MlxBatchEngine | embed_engine.MlxEmbedEngine):
            log.info("device: %s", use_device(self.settings.accel))
        self.engine.load()
        log.info("loaded %s in %.2fs; engine path: %s; BLAS: %s; batch %d, queue %d", self.place.model_id,
                 time.monotonic() - t0, self.engine.path,
                 f"OpenBLAS preloaded ({self.blas})" if self.blas else "mlx bundled (reference) BLAS",
                 self.settings.max_batch, self.settings.queue_max)
        self.report(kind=RunnerKind.LOADED, layers_loaded=self.status.total_layers)
        self.report(kind=RunnerKind.WARMING_UP)
        self.observer.enter(Phase.WARMUP)
        faults.inject("runner", "warmup")
        self.engine.warmup()
        if self.leader is not None:
            self.leader.wait_hellos(self.settings.group_connect_deadline)
        self.observer.enter(Phase.IDLE, "ready")
        self.report(kind=RunnerKind.READY, endpoint=self.endpoint, engine_path=self.engine.path,
                    speculation=str(getattr(self.engine, "speculation", "")))
        log.info("runner %s ready on %s", self.place.runner_id, self.endpoint)

    # ---- rank 0: requests and steps ---------------------------------------------------------
    def on_request(self, sock: zmq.Socket[Any]) -> None:
        def refuse(exc: WireError) -> None:
            REFUSALS.refuse(peer_of(exc.envelope) if isinstance(exc, RoutedDecodeError) else "", exc,
                            time.monotonic())
            if isinstance(exc, RoutedDecodeError):
                send_routed(sock, exc.envelope, Failed(request_id="", error=f"bad request: {exc}",
                                                       retryable=False, reason=FailReason.BAD_REQUEST))

        now = time.monotonic()
        for envelope, msg in drain(sock, recv_routed, limit=100, on_error=refuse):
            if self.embedder is not None:
                self.send(self.embedder.answer(envelope, msg))
            elif isinstance(msg, Embed):
                self.send(embed_engine.refuse_embed(envelope, msg, self.place.model_id))
            elif isinstance(msg, Generate):
                self.send(self.batcher.on_generate(envelope, msg, now), msg.task_id)
            elif isinstance(msg, Cancel) and (ended := self.batcher.cancel(msg.request_id)):
                log.info("request %s cancelled", msg.request_id)
                self.observer.cancel_requested(msg.request_id)
                self.send(ended)
        self.report_load_change()

    def send(self, outs: list[Out], task_id: str = "") -> None:
        for envelope, msg in outs:
            request_id = getattr(msg, "request_id", "")
            if isinstance(msg, (Started, Done, Failed)):
                self.observer.answered(msg, task_id)
            start_us = now_us() if self.batcher.traces else 0
            delivered = send_routed(self.router, envelope, msg)
            if start_us:
                self.observer.sent(request_id, msg, start_us, delivered)
            if not delivered:
                (self.embedder or self.batcher).client_gone(request_id)

    def step(self) -> bool:
        if self.embedder is not None:  # one group of inputs per step
            outs = self.embedder.step()
            self.send(outs or [])
            self.report_load_change()
            return outs is not None
        plan = self.batcher.plan()
        if plan is None:
            return False
        step = self.batcher.admit_plan(plan, time.monotonic())
        if self.leader is not None:
            self.leader.broadcast(step)
        self.observer.step_begins(step.seq, bool(step.inserts) or bool(self.batcher.last_prefilling))
        if faults.ENABLED:  # test faults, inside the step: `prefill` when requests join, `decode:<n>` at step n
            if plan.step.inserts:
                faults.inject("runner", "prefill")
            faults.inject("runner", f"decode:{plan.step.seq}")
            faults.inject("runner", "step")
        outs = self.batcher.run_step(time.monotonic)
        oldest = next(iter(self.batcher.running.values()), None)
        self.observer.step_ended(self.batcher.last_prefilling, self.batcher.last_tokens, len(self.batcher.running),
                                 oldest.task_id if oldest else "", oldest.request_id if oldest else "")
        self.send(outs)
        self.report_load_change()
        return True

    def keep_queue_alive(self) -> None:
        self.send(self.batcher.keep_alive())

    # ---- ranks > 0 -------------------------------------------------------------------------
    def on_steps(self, _sock: zmq.Socket[Any]) -> None:
        assert self.follower is not None
        traces = self.batcher.traces
        for step in self.follower.steps():
            self.observer.follower_step(step)
            self.observer.step_begins(step.seq, bool(step.inserts))
            start_us = now_us() if traces else 0
            out = follow(self.engine, step, self.follower.expected_seq)
            self.follower.expected_seq += 1
            self.batcher.tokens_total += len(out.tokens)
            prefilling = sum(p.done < p.total for p in out.prompts)
            self.observer.step_ended(prefilling, len(out.tokens), self.engine.active())
            if traces:
                traces.step(step.seq, start_us, now_us(), {p.uid for p in out.prompts},
                            {t.uid for t in out.tokens}, self.engine.active())
                traces.ended_uids(set(step.removes) | {t.uid for t in out.tokens if t.finish is not None})
            self.loop.rt.beat()


def make_engine(args: RunnerArgs, ring: Ring | None) -> Engine:
    """The instance's engine (`RunnerPlacement.engine`), sized by the node's runner settings."""
    place, settings = args.placement, args.settings
    spec = SpecSettings(spec_mode(settings.spec_mode, place.model_dir), settings.spec_draft_tokens,
                        settings.spec_max_streams, settings.spec_drafter)
    if place.engine == EngineKind.LLAMA_CPP:
        from skulk.services.runner.llamacpp.engine import KV_TOKENS, LlamaCppEngine

        return LlamaCppEngine(place.model_dir, max_batch=settings.max_batch, prefill_chunk=settings.prefill_chunk,
                              prefix_cache_bytes=settings.prefix_cache_mb << 20, n_threads=settings.threads,
                              kv_tokens=settings.kv_tokens or KV_TOKENS, spec=spec)
    return MlxBatchEngine(
        place.model_dir, ring, max_batch=settings.max_batch, prefill_chunk=settings.prefill_chunk,
        prefix_cache_bytes=settings.prefix_cache_mb << 20, quant_mode=QuantMode(settings.quantized), spec=spec)


def spec_mode(asked: str, model_dir: Path) -> SpecMode:
    """The configured mode, else the card's: drafter where it names a drafter, else off."""
    if asked:
        return SpecMode(asked)
    return SpecMode.DRAFTER if drafter_of(model_dir) else SpecMode.OFF


def setup_runner(loop: ServiceLoop, argv: list[str], blas: str | None) -> None:
    args = RunnerArgs.from_argv(argv)
    runner = Runner(loop, args, blas)
    try:
        runner.boot()
    except EngineRefused as exc:
        message = f"{args.placement.engine} cannot run {args.placement.model_id}: {exc}"
        runner.fail_before_exit(message, exitcodes.ENGINE_REFUSED)
        raise BootRefused(message, exitcodes.ENGINE_REFUSED) from exc
    except Exception as exc:
        log.exception("runner %s failed to load %s", args.placement.runner_id, args.placement.model_id)
        runner.report(kind=RunnerKind.FAILED, error_message=f"{type(exc).__name__}: {exc}")
        loop.rt.bus.close(linger=1000)  # let the failure report reach the bus before exit
        raise ValueError(f"load failed: {exc}") from exc
    if runner.follower is not None:
        loop.add_reader(runner.follower.sock, runner.on_steps)
    else:
        loop.add_reader(runner.router, runner.on_request)
        if (leader := runner.leader) is not None:  # nothing may arrive on the rank control port after boot
            loop.add_reader(leader.sock, lambda _s: leader.discard())
        loop.set_work(runner.step)
        loop.every(PROGRESS_INTERVAL_S, runner.keep_queue_alive)
    loop.every(REPORT_INTERVAL_S, runner.report)
    # A change held back by LOAD_REPORT_MIN_S goes out at the next tick, not with the 2 s report
    # (a batch that just emptied has no next step to send it).
    loop.every(LOAD_REPORT_MIN_S, runner.report_load_change)
    loop.on_stop(runner.shutdown)
