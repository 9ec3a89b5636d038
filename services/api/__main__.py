"""`python -m skulk.services.api`: run gunicorn in-process as a supervised child.

The socket is bound here and handed to gunicorn as `fd://`, so a taken port is a clean
BOOT_FAILURE at once instead of gunicorn's retry loop. Ready is reported from gunicorn's
`when_ready` hook and heartbeats come from the arbiter's own loop (`murder_workers` runs
every iteration), so a wedged arbiter stops the beat.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import gunicorn.util
import zmq
from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.errors import HaltServer
from setproctitle import setproctitle

from skulk.node import api_keys, exitcodes, metrics
from skulk.node.api_keys import ApiKey
from skulk.node.child_signals import DEFERRED_SIGNALS
from skulk.node.model_store import ModelStoreConfig
from skulk.node.role_args import ApiArgs, ChildArgs
from skulk.services import faults
from skulk.services.api.http import limits
from skulk.services.api.http.app import create_app
from skulk.services.api.http.auth import Policy, startup_warnings
from skulk.services.api.http.declare import Limits
from skulk.services.api.http.listen import listen_after_predecessor
from skulk.services.base import STATUS_INTERVAL_S, ChildRuntime, die_with_parent
from skulk.wire import endpoints
from skulk.wire.control import ChildReady
from skulk.wire.sockets import make_socket, send

log = logging.getLogger("skulk.api")


def worker_title(title: str) -> str:
    return f"skulk: {title} worker"


def use_skulk_titles(title: str) -> None:
    """gunicorn titles its processes `master [..]`/`worker [..]`; ours are `skulk: api[ worker]`."""

    def set_title(gunicorn_title: str) -> None:
        setproctitle(worker_title(title) if gunicorn_title.startswith("worker") else f"skulk: {title}")

    gunicorn.util._setproctitle = set_title


class SupervisedArbiter(Arbiter):
    runtime: ChildRuntime
    status_due = 0.0

    def init_signals(self) -> None:
        """gunicorn's handlers (TERM and INT: graceful stop, HUP: reload), then let in
        what the supervisor started us with blocked (supervisor/child.py): a Ctrl-C to the
        group during our imports is handled now by the arbiter's loop, without a traceback."""
        super().init_signals()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, DEFERRED_SIGNALS)

    def handle_int(self) -> None:
        """SIGINT (Ctrl-C to the group) stops gracefully, as SIGTERM does: the supervisor treats
        both as `stop`, and gunicorn's quick stop would SIGQUIT workers (see `worker_ready`)."""
        self.handle_term()

    def murder_workers(self) -> None:
        super().murder_workers()
        if not self.runtime.parent_alive():
            raise HaltServer("supervisor is gone", exitcodes.CLEAN)
        self.runtime.beat()
        now = time.monotonic()
        if now >= self.status_due:
            self.status_due = now + STATUS_INTERVAL_S
            self.runtime.publish_status(f"{len(self.WORKERS)} worker(s)", now)


def report_ready_from_worker(runtime: ChildRuntime, worker: Any) -> None:
    """Ready means a worker has loaded the app and can serve, so the worker says it,
    on behalf of its arbiter (the pid the supervisor knows), on a socket of its own."""
    ctx: zmq.Context[Any] = zmq.Context.instance()
    sock = make_socket(ctx, zmq.PUSH, connect=endpoints.supervisor_notify(runtime.args.run_dir))
    try:
        send(sock, ChildReady(child_id=runtime.args.child_id, pid=os.getppid(),
                              detail=f"worker {os.getpid()} serving"), flags=zmq.NOBLOCK)
    except zmq.Again:
        log.warning("api: could not report ready (supervisor not reading)")
    finally:
        sock.close(linger=1000)


def worker_ready(runtime: ChildRuntime, worker: Any) -> None:
    """A worker has gunicorn's signal handlers and its app; two of them change for a signal to
    the whole group. SIGINT (Ctrl-C) is a graceful stop, as SIGTERM: gthread's quick-stop
    handler is not reentrant, and a second signal during it (the arbiter's) deadlocks the worker
    in ThreadPoolExecutor.shutdown. SIGHUP is the arbiter's (reload), not a reason to die."""
    signal.signal(signal.SIGINT, worker.handle_exit)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    report_ready_from_worker(runtime, worker)


class ApiApplication(BaseApplication):
    def __init__(self, runtime: ChildRuntime, sock: socket.socket, api: ApiArgs, keys: tuple[ApiKey, ...],
                 store: ModelStoreConfig | None, staging_root: Path | None, client_limits: Limits,
                 graceful_s: float = 3.0) -> None:
        self.runtime = runtime
        self.api = api
        self.keys, self.store, self.staging_root, self.client_limits = keys, store, staging_root, client_limits
        self.sock = sock
        self.settings = {
            "bind": [f"fd://{sock.fileno()}"],
            # gthread, with gunicorn's own 400/414/431 answers in the error envelope (worker.py)
            "worker_class": "skulk.services.api.http.gunicorn_worker.EnvelopeWorker",
            "workers": api.workers,
            "threads": api.threads,
            "graceful_timeout": max(1, int(graceful_s)),
            "timeout": 120,
            "keepalive": 5,
            **limits.HEADER_LIMITS,  # an oversized request line or header: 414/431 before the app
            "control_socket_disable": True,
            "proc_name": runtime.args.title,
            "accesslog": None,
            "loglevel": "warning",
            "post_worker_init": lambda worker: worker_ready(runtime, worker),
            # A worker whose arbiter was killed must not linger holding the port.
            "post_fork": lambda _server, _worker: die_with_parent(signal.SIGKILL),
            # Prometheus multiprocess mode: a dead worker's live gauges (requests in flight) go
            # with it; at start, those of a previous arbiter's workers (killed with it) too.
            "child_exit": lambda _server, worker: metrics.mark_dead(worker.pid),
            "on_starting": lambda _server: metrics.forget_dead_processes(),
        }
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return create_app(self.runtime.args, self.api, self.keys, self.store, self.staging_root, self.client_limits)

    def run(self) -> None:
        SupervisedArbiter.runtime = self.runtime
        SupervisedArbiter(self).run()


def main() -> None:
    args, rest = ChildArgs.split(sys.argv[1:])
    api = ApiArgs.from_argv(rest)
    store = api.store.config(args.home) if api.store else None
    host = api.store is not None and bool(api.store.is_store_host)  # decided by the supervisor
    staging = store.staging.node_cache_path if store and store.staging.enabled and not host else None
    # A private context: gunicorn forks workers after this, and they must not share it.
    runtime = ChildRuntime("api", args, ctx=zmq.Context())
    use_skulk_titles(args.title)
    faults.inject("api", "boot")
    try:
        keys = api_keys.from_file(Path(api.config_file)) if api.config_file else ()
    except api_keys.ConfigError as exc:  # the message names the entry, never a key
        log.error("api: %s", exc)
        os._exit(exitcodes.CONFIG_ERROR)
    for warning in startup_warnings(Policy(keys, api.open_admin, api.listen), api.port):
        log.warning("%s", warning)
    limits.fresh_streams_dir(args.run_dir)
    client_limits = Limits.of(api, limits.streams_dir(args.run_dir))
    try:
        sock = listen_after_predecessor(api.listen, api.port, runtime.parent_pid, worker_title(args.title))
    except OSError as exc:
        log.error("api cannot listen on %s:%d: %s", api.listen, api.port, exc.strerror)
        os._exit(exitcodes.BOOT_FAILURE)
    ApiApplication(runtime, sock, api, keys, store, staging, client_limits).run()


main()
