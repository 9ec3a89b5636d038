"""The root process's one poll loop: control ROUTER, notify PULL, and the signal wakeup fd.

Signal handlers only record (the wakeup fd carries the signal number); the loop turns
signals into admin verbs, reaps exited children, feeds ready/heartbeat messages to the tree,
answers the control socket and runs the watchdog. The poll timeout is the next deadline.
A whole-node restart drains first (`drain.py`): the tree keeps running until the node's master
says `drained` or the drain deadline passes, then stops and execs.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import zmq

from skulk.node import last_words, node_identity
from skulk.node.config import NodeConfig
from skulk.supervisor import control
from skulk.supervisor import drain as node_drain  # `drain` is the sockets' helper
from skulk.supervisor.child import ChildProcess, DeferredSignals, Process, child_env
from skulk.supervisor.probe import ProgressProbe
from skulk.supervisor.spec import ChildSpec, SupervisorSpec
from skulk.supervisor.supervisor import Supervisor
from skulk.supervisor.tree import RUNNER_MODULE, RUNNER_STACK
from skulk.supervisor.zygote_client import ForkedChild, Standby, Zygote
from skulk.wire import endpoints
from skulk.wire.control import AdminCommand, AdminReply, AdminVerb, ChildReady, Heartbeat
from skulk.wire.errors import WireError
from skulk.wire.events import ChildLifecycle, LifecycleEvent
from skulk.wire.refusals import Refusals, peer_of
from skulk.wire.sockets import BusPublisher, RoutedDecodeError, drain, make_socket, recv_routed, send_routed
from skulk.wire.topics import EVT_SUPERVISOR

log = logging.getLogger("skulk.supervisor")
CONTROL_REFUSALS = Refusals("supervisor: admin control socket", log)

MAX_POLL_S = 5.0
STANDBY_KEEP_S = 300.0
"""A standby runner nobody took within this long is let go (it holds the engine's imports)."""


def child_modules(spec: SupervisorSpec) -> list[str]:
    """The module of every kind of child the tree may start (its template's too), in order."""
    out: list[str] = []
    for child in (*spec.children, *((spec.template,) if spec.template else ())):
        for module in child_modules(child) if isinstance(child, SupervisorSpec) else [child.module]:
            if module not in out:
                out.append(module)
    return out


def reap_orphans(known: set[int]) -> None:
    """As a child subreaper (`zygote_client`) we inherit every orphaned descendant (a gunicorn
    worker whose arbiter was killed, ...): reap those the tree does not own, so none stays a
    zombie. The tree's own children are left for their `poll` (`WNOWAIT` only peeks)."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid in known:
            return
        try:
            os.waitpid(info.si_pid, 0)
        except ChildProcessError:
            return


class NodeLoop:
    def __init__(self, cfg: NodeConfig, spec: SupervisorSpec, run_dir: Path, expect_runner: bool = False,
                 zygote: Zygote | None = None) -> None:
        """`expect_runner`: a runner will be wanted soon (`--place`, or an in-place restart of a
        node that ran one): a standby runner is made at boot. `zygote`: one already forked from
        this process (`zygote_fork.py`); without it one is started as a fresh interpreter."""
        self.cfg = cfg
        self.spec = spec
        self.run_dir = run_dir
        self.exit_code: int | None = None
        self.after_stop = "exit"  # or "exec"
        self.waiters: list[control.Waiter] = []
        self.drain: node_drain.Drain | None = None  # a restart waiting for the node's requests to end
        self._announced_ready = False
        self._started_at = time.monotonic()
        self.probe = ProgressProbe()
        self.zygote: Zygote | None = zygote
        self.standby: Standby | None = None
        self.expect_runner = expect_runner
        self.ran_runner = False

    def _answer(self, envelope: list[bytes], reply: AdminReply) -> None:
        """Send an admin reply, with the name this node goes by now (gossip may have taken its
        derived name since the start: `node_identity`)."""
        send_routed(self.control, envelope, replace(reply, node_name=node_identity.current(self.cfg)))

    # ---- effects handed to the tree -------------------------------------------------
    def _spawn(self, spec: ChildSpec, child_id: str, extra: tuple[str, ...]) -> Process:
        standby = None
        if spec.module == RUNNER_MODULE:
            self.ran_runner = True
            standby, self.standby = self.standby, None
        proc = ChildProcess.spawn(spec, child_id=child_id, home=self.cfg.home, run_dir=self.run_dir,
                                  extra_args=extra, zygote=self.zygote, standby=standby)
        if proc.standby and standby is not None:
            log.info("%s is the standby runner (pid %d), forked %.1fs ago to import its engine",
                     child_id, proc.pid, time.monotonic() - standby.created)
        return proc

    def _make_standby(self, why: str) -> None:
        """A runner-to-be, forked now to import mlx and mlx-lm before it is needed (`zygote.py`)."""
        if self.standby is not None or self.zygote is None or self.root.terminating:
            return
        self.standby = self.zygote.standby(RUNNER_MODULE, RUNNER_STACK, child_env(self.run_dir))
        if self.standby is not None:
            log.info("standby runner forked (pid %d): %s", self.standby.proc.pid, why)

    def _tend_standby(self, now: float) -> None:
        if self.standby is not None and (self.standby.proc.poll() is not None
                                         or now - self.standby.created > STANDBY_KEEP_S):
            log.info("standby runner (pid %d) %s", self.standby.proc.pid,
                     "exited" if self.standby.proc.returncode is not None else "not needed: let go")
            self.standby.close()
            self.standby = None

    def _start_zygote(self, wake_fd: int) -> None:
        """The node's zygote (`zygote.py`), waited for up to the roles' own ready deadline: a
        child forked from it starts in milliseconds; without it, children start fresh."""
        if self.zygote is None:
            with DeferredSignals():
                self.zygote = Zygote.start(child_modules(self.spec), child_env(self.run_dir))
        if self.zygote is None:
            return
        started = self.zygote.started
        if self.zygote.wait_ready(time.monotonic() + self.cfg.ready_timeout_s, wake_fd):
            log.info("zygote ready in %.2fs (pid %d, %s): children are forked from it", time.monotonic() - started,
                     self.zygote.proc.pid, "forked from the supervisor" if isinstance(self.zygote.proc, ForkedChild)
                     else "a fresh interpreter")

    def _emit(self, child_id: str, sup: str, event: LifecycleEvent, pid: int | None, restarts: int,
              detail: str, exit_code: int | None = None) -> None:
        self.events.publish(EVT_SUPERVISOR, ChildLifecycle(
            child_id=child_id, supervisor=sup, event=event, pid=pid, restarts=restarts,
            detail=detail, exit_code=exit_code), suffix=child_id)

    def _root_done(self, _id: str, code: int, _now: float) -> None:
        self.exit_code = code

    # ---- the loop ---------------------------------------------------------------------
    def run(self) -> int:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.control = make_socket(self.ctx, zmq.ROUTER,
                                   bind=endpoints.supervisor_control(self.run_dir))
        self.notify = make_socket(self.ctx, zmq.PULL, hwm=10000,
                                  bind=endpoints.supervisor_notify(self.run_dir))
        self.events = BusPublisher(self.ctx, endpoints.bus_in(self.run_dir))  # holds its events until the bus is up
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        old_fd = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        for sig in (*control.SIGNAL_VERBS, signal.SIGCHLD):
            signal.signal(sig, lambda *_: None)
        poller = zmq.Poller()
        poller.register(self.control, zmq.POLLIN)
        poller.register(self.notify, zmq.POLLIN)
        poller.register(wake_r.fileno(), zmq.POLLIN)
        poller.register(self.events.sock, zmq.POLLIN)
        self._start_zygote(wake_r.fileno())
        self.root = Supervisor(self.spec, self._spawn, self._emit, self._root_done, probe=self.probe.progress)
        if self.expect_runner:
            self._make_standby("a runner is expected at start")
        self.root.start(time.monotonic())
        try:
            last_wake = time.monotonic()
            while self.exit_code is None:
                timeout_ms = self._timeout_ms()
                worked = time.monotonic() - last_wake  # this loop's own work since it last woke
                ready = dict(poller.poll(timeout_ms))
                now = time.monotonic()
                overslept = now - last_wake - timeout_ms / 1000
                if overslept > self.cfg.heartbeat_s:
                    # Nobody was here to read beats (SIGSTOP, suspend): do not blame children.
                    log.warning("supervisor loop was stalled %.1fs past its deadline (%.1fs of it in its own "
                                "work, the rest not woken: frozen, suspended or starved of CPU); restarting "
                                "every child's liveness window", overslept, worked)
                    self.root.forgive(now)
                last_wake = now
                self._see_exits()
                self._signals(wake_r, now)  # always, and after `_see_exits`: see there
                self._reap(now)
                if self.notify in ready:
                    self._drain_notify(now)
                if self.events.sock in ready:
                    self.events.on_readable()
                if self.control in ready:
                    self._drain_control(now)
                self._drain_tick(now)
                self._tend_standby(now)
                self.probe.sample([s.proc.pid for _o, s in self.root.workers() if s.proc is not None], now)
                self.root.tick(now)
                self._serve_waiters(now)
                self._announce(now)
        finally:
            for waiter in self.waiters:
                self._answer(waiter.envelope, control.reply(
                    self.root, time.monotonic(), False, "node is stopping"))
            self.control.close(linger=500)  # let those replies out: destroy(linger=0) drops them
            signal.set_wakeup_fd(old_fd)
            for sig in (*control.SIGNAL_VERBS, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            wake_r.close()
            wake_w.close()
            self.ctx.destroy(linger=0)
            if self.standby is not None:
                self.standby.close()
            if self.zygote is not None:
                self.zygote.close()
        return self.exit_code

    def _timeout_ms(self) -> int:
        times = [t for t in (self.root.next_deadline(),
                             node_drain.next_deadline(self.drain) if self.drain else None,
                             *(w.deadline for w in self.waiters)) if t is not None]
        # Never sleep longer than one heartbeat: a freeze of this process (SIGSTOP, suspend)
        # then always shows up as an oversleep, even when it happened inside the poll.
        wait = min([MAX_POLL_S, self.cfg.heartbeat_s, *(t - time.monotonic() for t in times)])
        return max(0, int(wait * 1000) + 1)

    def _signals(self, wake_r: socket.socket, now: float) -> None:
        try:
            data = wake_r.recv(4096)
        except BlockingIOError:
            return
        for signum in data:  # one byte per delivered signal, in delivery order
            verb = control.SIGNAL_VERBS.get(signum)
            if verb is not None:
                name = signal.Signals(signum).name
                if self.root.terminating:  # Ctrl-C twice, or systemd after our own stop began
                    log.info("signal %s: the node is already stopping", name)
                    continue
                log.info("signal %s -> %s", name, verb)
                # SIGHUP restarts at once, a drain under way included: a closed terminal sends it
                # to the whole group, whose processes stop on it by themselves (`exits.py`).
                self._node_verb(verb, now, f"signal {name}", drain=False)

    def _node_verb(self, verb: AdminVerb, now: float, why: str = "", drain: bool = True) -> None:
        """`stop` or `restart` of the whole node (callers refuse a second one). A restart drains
        first (`drain`: the admin verb; not SIGHUP); a stop, or a restart that does not drain,
        during that drain stops at once."""
        if self.root.terminating or (self.drain is not None and verb is AdminVerb.RESTART and drain):
            return
        why = why or f"admin {verb}"
        self.after_stop = "exec" if verb is AdminVerb.RESTART else "exit"
        # Told before any child stops: the master has the leader mark this node restarting
        # (routing sends it nothing new, the node and its instances are kept while it is away)
        # and says when the drain is over; a stop clears that mark.
        event = LifecycleEvent.RESTARTING if verb is AdminVerb.RESTART else LifecycleEvent.STOPPING
        self._emit("node", self.spec.id, event, None, 0, why)
        if verb is AdminVerb.RESTART and drain and self.drain is None:
            self.drain = node_drain.begin(now, self.cfg.drain_timeout_s)
            if self.drain is not None:
                log.info("%s: draining first: the tree stops once the node's requests have ended, "
                         "at most %gs from now (node.drain_timeout_s)", why, self.cfg.drain_timeout_s)
                return
        self.drain = None
        self.root.stop(now, reason=why)

    def _drain_tick(self, now: float) -> None:
        if self.drain is None or self.root.terminating:
            return
        if node_drain.expired(self.drain, now):
            log.warning("drain deadline (%gs, node.drain_timeout_s) passed with requests still in "
                        "flight; restarting anyway", self.cfg.drain_timeout_s)
            self._drained(now, "restart: drain deadline passed")
        elif node_drain.announce_due(self.drain, now):
            self.drain = node_drain.announced(self.drain, now)
            self._emit("node", self.spec.id, LifecycleEvent.RESTARTING, None, 0,
                       f"draining, {self.drain.deadline - now:.0f}s left")

    def _drained(self, now: float, why: str) -> None:
        took = now - self.drain.started if self.drain else 0.0
        self.drain = None
        log.info("%s after %.2fs; stopping the tree to restart in place", why, took)
        self.root.stop(now, reason=why)

    def _see_exits(self) -> None:
        """Collect exit codes (waitpid) before the signals are read, so a whole-group stop is
        never mistaken for a failure: the kernel made our SIGTERM/SIGINT pending before any
        child could act on its own copy (killpg, Ctrl-C; systemd signals the main PID first),
        and a pending signal is delivered, its byte written to the wakeup fd, on our return
        from the very syscall that sees the child's exit. So when a child's exit is handled,
        the stop it belongs to has been started (libzmq's threads block signals: this thread
        takes them)."""
        known = {self.zygote.proc.pid} if self.zygote is not None else set()
        if self.standby is not None:
            known.add(self.standby.proc.pid)
        for _owner, slot in list(self.root.workers()):
            if slot.proc is not None:
                slot.proc.poll()
                known.add(slot.proc.pid)
        reap_orphans(known)

    def _reap(self, now: float) -> None:
        for owner, slot in list(self.root.workers()):
            if slot.proc is not None and (code := slot.proc.poll()) is not None:
                owner.handle_exit(slot.id, code, now, last_words.take(self.run_dir, slot.proc.pid))
                if slot.spec.module == RUNNER_MODULE and code not in (0, -signal.SIGTERM):
                    self._make_standby(f"{slot.id} failed: the leader re-creates its instance")

    def _drain_notify(self, now: float) -> None:
        for msg in drain(self.notify, limit=10000):
            if isinstance(msg, (ChildReady, Heartbeat)):
                found = self.root.find(msg.child_id)
                if found is None:
                    continue
                owner = found[0]
                if isinstance(msg, ChildReady):
                    owner.on_ready(msg.child_id, msg.pid, now)
                else:
                    owner.on_beat(msg.child_id, msg.pid, now, msg.step, msg.step_age_s, msg.seq)

    def _drain_control(self, now: float) -> None:
        def refuse(exc: WireError) -> None:
            CONTROL_REFUSALS.refuse(peer_of(exc.envelope) if isinstance(exc, RoutedDecodeError) else "", exc, now)
            if isinstance(exc, RoutedDecodeError):
                self._answer(exc.envelope,
                            control.reply(self.root, now, False, f"bad request: {exc}"))

        for envelope, msg in drain(self.control, recv_routed, limit=1000, on_error=refuse):
            if not isinstance(msg, AdminCommand):
                self._answer(envelope, control.reply(
                    self.root, now, False, f"expected an AdminCommand, got {msg.TYPE}"))
                continue
            result = control.apply(msg, self.root, envelope, now, self.drain is not None)
            if isinstance(result, control.Waiter):
                self.waiters.append(result)
            elif isinstance(result, control.NodeVerb) and result.verb is AdminVerb.DRAINED:
                draining = self.drain is not None and not self.root.terminating
                self._answer(envelope, control.reply(
                    self.root, now, draining, "drained: restarting" if draining else "no drain under way"))
                if draining:
                    self._drained(now, "restart: the node's requests have ended")
            elif isinstance(result, control.NodeVerb):
                # a second restart/stop while one is under way (a stop may cut a drain short)
                if self.root.terminating or (self.drain is not None and result.verb is AdminVerb.RESTART):
                    self._answer(envelope, control.reply(
                        self.root, now, False, f"{self.after_stop} already pending"))
                    continue
                self._answer(envelope, control.reply(
                    self.root, now, True, "restarting" if result.verb is AdminVerb.RESTART else "stopping"))
                self._node_verb(result.verb, now)
            else:
                self._answer(envelope, result)

    def _serve_waiters(self, now: float) -> None:
        still: list[control.Waiter] = []
        for w in self.waiters:
            if control.satisfied(self.root, w.target, w.min_restarts, self.drain is not None):
                self._answer(w.envelope, control.reply(self.root, now, True, "ready"))
            elif now >= w.deadline:
                self._answer(w.envelope, control.reply(
                    self.root, now, False, f"timed out waiting for {w.target or 'the node'}"))
            else:
                still.append(w)
        self.waiters = still

    def _announce(self, now: float) -> None:
        if not self._announced_ready and control.satisfied(self.root, "", 0):
            self._announced_ready = True
            log.info("node ready: every child is running (%.2fs after start, pid %d)",
                     now - self._started_at, os.getpid())

