"""What every child process shares, and the one poll loop of a plain service.

`ChildRuntime`: process title, logging, parent-death detection, the PUSH socket to the
supervisor (ready + heartbeats). `ServiceLoop`: one `zmq.Poller` over the role's sockets, the
signal wakeup fd and timers; it heartbeats from the loop itself, so a wedged handler stops
the beat and the watchdog kills it. `run_service(role, setup)` ties them together and maps
failures onto the exit-code contract.
"""

from __future__ import annotations

import ctypes
import heapq
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq
from setproctitle import setproctitle

from skulk.node import exitcodes, last_words, logsetup
from skulk.node.child_signals import DEFERRED_SIGNALS, STOP_SIGNALS
from skulk.node.role_args import ChildArgs
from skulk.services import faults
from skulk.wire import curve, endpoints, refusals
from skulk.wire.control import ChildReady, Heartbeat
from skulk.wire.errors import WireError
from skulk.wire.events import ServiceStatus
from skulk.wire.message import Message
from skulk.wire.sockets import BusPublisher, make_socket, send
from skulk.wire.topics import EVT_SERVICE, Topic

log = logging.getLogger("skulk.service")

STATUS_INTERVAL_S = 2.0
"""How often each role publishes ServiceStatus on the bus (what the tap shows)."""


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Linux: ask the kernel to send `sig` when our parent dies (also checked every loop tick)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG
        except OSError:
            pass


class ChildRuntime:
    def __init__(self, role: str, args: ChildArgs, ctx: zmq.Context[Any] | None = None) -> None:
        self.role = role
        self.args = args
        self.started = time.monotonic()
        setproctitle(f"skulk: {args.title}")
        logsetup.setup(args.child_id, args.home / "logs", settings=args.log)
        # the supervisor checked the key file; TCP sockets use it
        curve.configure(curve.load_key_file(Path(args.key_file)) if args.key_file else None)
        self.parent_pid = int(os.environ.get("SKULK_PARENT_PID", os.getppid()))
        die_with_parent()
        self.ctx = ctx or zmq.Context.instance()
        self.notify = make_socket(self.ctx, zmq.PUSH, hwm=100,
                                  connect=endpoints.supervisor_notify(args.run_dir))
        self.bus = BusPublisher(self.ctx, endpoints.bus_in(args.run_dir), hwm=1000)
        self._beat_seq = 0
        self._beat_at = 0.0  # monotonic time of the last beat sent (told when the role stops)
        self._beats_dropped = 0  # beats the supervisor's socket would not take (zmq.Again)
        self._status_seq = 0

    def parent_alive(self) -> bool:
        return os.getppid() == self.parent_pid

    def ready(self, detail: str = "") -> None:
        send(self.notify, ChildReady(child_id=self.args.child_id, pid=os.getpid(), detail=detail),
             flags=zmq.NOBLOCK)
        log.info("%s ready%s", self.args.child_id, f": {detail}" if detail else "")

    def beat(self) -> None:
        self._beat_seq += 1
        self._beat_at = time.monotonic()
        try:
            send(self.notify, Heartbeat(child_id=self.args.child_id, pid=os.getpid(),
                                        seq=self._beat_seq), flags=zmq.NOBLOCK)
        except zmq.Again:
            self._beats_dropped += 1  # supervisor not reading: it judges us by the beats it does get

    def beats_told(self, now: float) -> str:
        """The last beat sent, for the stop line: set beside the supervisor's kill line (the last
        beat it heard), it tells a loop that stopped beating from beats lost on the way."""
        if not self._beat_seq:
            return "no heartbeat sent yet"
        dropped = f", {self._beats_dropped} dropped unsent" if self._beats_dropped else ""
        return f"last heartbeat #{self._beat_seq} sent {now - self._beat_at:.1f}s ago{dropped}"

    def publish(self, topic: Topic, msg: Message, suffix: str = "") -> None:
        self.bus.publish(topic, msg, suffix)

    def publish_status(self, detail: str, now: float) -> None:
        """One ServiceStatus on the bus (callers pace it every STATUS_INTERVAL_S)."""
        self._status_seq += 1
        self.publish(EVT_SERVICE, ServiceStatus(
            role=self.role, child_id=self.args.child_id, pid=os.getpid(), seq=self._status_seq,
            uptime_s=round(now - self.started, 3), detail=detail), suffix=self.args.child_id)


Handler = Callable[[Any], None]


class PeerLost(RuntimeError):
    """An expected way for a service to end that no traceback explains: a peer it works in
    lock-step with is gone or disagrees (a rank of a sharded instance). Logged as one line; the
    process exits with `exit_code` so its supervisor and the cluster react as to any crash
    (`exitcodes.PEER_LOST` where the peer is gone: the peer's own failure is the cause)."""

    exit_code: int = exitcodes.CRASHED


class BootRefused(RuntimeError):
    """A boot that ends with a typed exit code of its own (`exitcodes`), not BOOT_FAILURE: the
    process reported why already; its supervisor and the leader act on the code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class BootStopped(BaseException):
    """A stop signal while the role boots (a runner may load a model for minutes): the boot ends
    at once and the process exits CLEAN. A BaseException, so a boot's `except Exception` lets it
    through, as it does KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class ServiceLoop:
    """The single poll loop of a service process."""

    def __init__(self, runtime: ChildRuntime) -> None:
        self.rt = runtime
        self.ctx = runtime.ctx
        self.poller = zmq.Poller()
        self._handlers: dict[Any, Handler] = {}
        self._timers: list[tuple[float, int, float, Callable[[], None]]] = []
        self._timer_seq = 0
        self._stop = False
        self._work: Callable[[], bool] | None = None
        self._stop_hooks: list[Callable[[], None]] = []
        self.status_detail = ""
        self._wake_r, wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        wake_w.setblocking(False)
        self._wake_w = wake_w
        signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        self.booting = True  # until `run_service` has set the role up
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_stop_signal)
        # The supervisor starts us with these blocked (supervisor/child.py): one that came
        # during our imports is delivered now, to the handler above.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, DEFERRED_SIGNALS)
        self.add_reader(self._wake_r, self._on_signal)
        self.add_reader(runtime.bus.sock, lambda _s: runtime.bus.on_readable())  # held events out once joined
        self.every(runtime.args.heartbeat_s, runtime.beat)
        self.every(min(runtime.args.heartbeat_s, 1.0), self._check_parent)
        self._refusals = refusals.Refusals(f"{runtime.args.child_id}: bad frames", log)
        self.every(refusals.SUMMARY_PERIOD_S, lambda: refusals.flush_all(time.monotonic()))  # bursts that stopped
        self.every(STATUS_INTERVAL_S, lambda: runtime.publish_status(self.status_detail,
                                                                    time.monotonic()))

    def add_reader(self, sock: Any, handler: Handler) -> None:
        """Call `handler(sock)` when readable (zmq sockets, or anything with a fileno)."""
        key = sock if isinstance(sock, zmq.Socket) else sock.fileno()
        self.poller.register(key, zmq.POLLIN)
        self._handlers[key] = lambda _k: handler(sock)

    def remove_reader(self, sock: Any) -> None:
        key = sock if isinstance(sock, zmq.Socket) else sock.fileno()
        self.poller.unregister(key)
        self._handlers.pop(key, None)

    def every(self, interval_s: float, fn: Callable[[], None], first_in: float | None = None) -> None:
        self._timer_seq += 1
        due = time.monotonic() + (interval_s if first_in is None else first_in)
        heapq.heappush(self._timers, (due, self._timer_seq, interval_s, fn))

    def publish(self, topic: Topic, msg: Message, suffix: str = "") -> None:
        self.rt.publish(topic, msg, suffix)

    def on_stop(self, fn: Callable[[], None]) -> None:
        """Run `fn` once when the loop ends by an orderly stop (SIGTERM), before exit."""
        self._stop_hooks.append(fn)

    def set_work(self, step: Callable[[], bool]) -> None:
        """`step()` runs once per loop iteration and returns True while it has more to do;
        the poll does not wait while it does, so sockets, timers and the heartbeat are
        served between steps (a runner's decode steps)."""
        self._work = step

    def stop(self) -> None:
        self._stop = True

    def _on_stop_signal(self, signum: int, _frame: Any) -> None:
        """Runs in the main thread between bytecodes; after boot the wakeup fd carries the
        signal to the loop (`_on_signal`), while booting it ends the boot."""
        if self.booting:
            self.booting = False
            raise BootStopped(signum)

    def _on_signal(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(64)
        except BlockingIOError:
            return
        for signum in data:
            # One line per stop: a group signal often comes with the supervisor's own SIGTERM.
            if signum in STOP_SIGNALS and not self._stop:
                log.info("%s: %s, stopping (%s)", self.rt.args.child_id, signal.Signals(signum).name,
                         self.rt.beats_told(time.monotonic()))
                self._stop = True

    def run(self) -> int:
        faults.inject(self.rt.role, "loop")
        busy = False
        while not self._stop:
            now = time.monotonic()
            timeout = max(0.0, self._timers[0][0] - now) if self._timers else 1.0
            for key, _ in self.poller.poll(0 if busy else int(timeout * 1000) + 1):
                handler = self._handlers.get(key)
                if handler is None:  # removed by a handler before it in this round (a link closed)
                    continue
                try:
                    handler(key)
                except WireError as exc:  # a bad frame is logged, never fatal
                    self._refusals.refuse("", exc, time.monotonic())
            now = time.monotonic()
            while self._timers and self._timers[0][0] <= now:
                due, seq, interval, fn = heapq.heappop(self._timers)
                fn()
                heapq.heappush(self._timers, (max(due + interval, now), seq, interval, fn))
            busy = self._work() if self._work is not None else False
        for hook in self._stop_hooks:
            try:
                hook()
            except Exception:  # noqa: BLE001 - a failing hook must not turn a stop into a crash
                log.exception("%s: stop hook failed", self.rt.args.child_id)
        return exitcodes.CLEAN

    def _check_parent(self) -> None:
        if not self.rt.parent_alive():
            log.warning("%s: supervisor is gone; exiting", self.rt.args.child_id)
            self._stop = True


def run_service(role: str, setup: Callable[[ServiceLoop, list[str]], None]) -> None:
    """Entry point of every plain service: boot, report ready, loop, exit by the contract.
    `setup` gets the role's own arguments (what follows `ChildArgs`)."""
    args, rest = ChildArgs.split(sys.argv[1:])
    runtime = ChildRuntime(role, args)
    try:
        loop = ServiceLoop(runtime)
        faults.inject(role, "boot")
        setup(loop, rest)
        loop.booting = False
    except BootStopped as stop:
        log.info("%s: %s while booting, stopping", args.child_id, signal.Signals(stop.signum).name)
        logging.shutdown()
        os._exit(exitcodes.CLEAN)
    except BootRefused as exc:
        log.error("%s failed to boot: %s", args.child_id, exc)
        last_words.leave(args.run_dir, str(exc))
        logging.shutdown()
        os._exit(exc.code)
    except (zmq.ZMQError, OSError, ValueError, SystemExit) as exc:
        log.error("%s failed to boot: %s", args.child_id, exc)
        if not isinstance(exc, SystemExit):  # argparse has printed its own usage line
            last_words.leave(args.run_dir, f"failed to boot: {exc}")
        os._exit(exitcodes.BOOT_FAILURE)
    runtime.ready(loop.status_detail)
    faults.inject(role, "ready")
    try:
        code = loop.run()
    except PeerLost as exc:
        log.error("%s stopped: %s", args.child_id, exc)
        last_words.leave(args.run_dir, str(exc))
        code = exc.exit_code
    except Exception as exc:
        log.exception("%s crashed", args.child_id)
        last_words.leave(args.run_dir, f"{type(exc).__name__}: {exc}")
        code = exitcodes.CRASHED
    curve.release(runtime.ctx)  # its watcher and ZAP threads first: libzmq aborts under them
    runtime.ctx.destroy(linger=0)
    logging.shutdown()
    os._exit(code)
