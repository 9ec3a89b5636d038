"""`python -m skulk.services.api`: run gunicorn in-process as a supervised child.

The socket is bound here and handed to gunicorn as `fd://`, so a taken port is a clean
BOOT_FAILURE at once instead of gunicorn's retry loop. Ready is reported from gunicorn's
`when_ready` hook and heartbeats come from the arbiter's own loop (`murder_workers` runs
every iteration), so a wedged arbiter stops the beat.
"""

from __future__ import annotations

import argparse
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

from skulk.services import faults
from skulk.services.api.app import create_app
from skulk.services.api.gateway import StreamTiming
from skulk.services.base import STATUS_INTERVAL_S, ChildRuntime, die_with_parent, parse_child_args
from skulk.supervisor import exitcodes, model_store
from skulk.supervisor.model_store import ModelStoreConfig
from skulk.wire import endpoints
from skulk.wire.control import ChildReady
from skulk.wire.sockets import make_socket, send

log = logging.getLogger("skulk.api")


def use_skulk_titles(title: str) -> None:
    """gunicorn titles its processes `master [..]`/`worker [..]`; ours are `skulk: api[ worker]`."""

    def set_title(gunicorn_title: str) -> None:
        setproctitle(f"skulk: {title}" + (" worker" if gunicorn_title.startswith("worker") else ""))

    gunicorn.util._setproctitle = set_title  # type: ignore[attr-defined]


class SupervisedArbiter(Arbiter):
    runtime: ChildRuntime
    status_due = 0.0

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


class ApiApplication(BaseApplication):
    def __init__(self, runtime: ChildRuntime, sock: socket.socket, workers: int, threads: int,
                 graceful_s: float, node_id: str, timing: StreamTiming, config_file: str = "",
                 store: ModelStoreConfig | None = None, staging_root: Path | None = None,
                 listen: str = "0.0.0.0") -> None:
        self.runtime = runtime
        self.listen = listen
        self.config_file = config_file
        self.store, self.staging_root = store, staging_root
        self.node_id = node_id
        self.timing = timing
        self.sock = sock
        self.settings = {
            "bind": [f"fd://{sock.fileno()}"],
            "worker_class": "gthread",
            "workers": workers,
            "threads": threads,
            "graceful_timeout": max(1, int(graceful_s)),
            "timeout": 120,
            "keepalive": 5,
            "control_socket_disable": True,
            "proc_name": runtime.args.title,
            "accesslog": None,
            "loglevel": "warning",
            "post_worker_init": lambda worker: report_ready_from_worker(runtime, worker),
            # A worker whose arbiter was killed must not linger holding the port.
            "post_fork": lambda _server, _worker: die_with_parent(signal.SIGKILL),
        }
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        args = self.runtime.args
        return create_app(args.home, args.run_dir, self.node_id, self.timing,
                          Path(self.config_file) if self.config_file else None, self.staging_root, self.store,
                          self.listen)

    def run(self) -> None:
        SupervisedArbiter.runtime = self.runtime
        SupervisedArbiter(self).run()


def listen_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def main() -> None:
    args = parse_child_args(sys.argv[1:])
    p = argparse.ArgumentParser(prog="skulk.services.api")
    p.add_argument("--listen", default="0.0.0.0")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--threads", type=int, default=128)
    p.add_argument("--node-id", required=True)
    p.add_argument("--stall-timeout", type=float, default=StreamTiming.stall_s)
    p.add_argument("--keepalive", type=float, default=StreamTiming.keepalive_s)
    p.add_argument("--config-file", default="")  # the node's skulk.yaml (GET/PUT /config)
    p.add_argument("--node-name", default="")
    model_store.add_store_arguments(p)  # none: no store
    ns = p.parse_args(args.rest)
    store = model_store.store_from_args(ns, args.home)
    host = store is not None and model_store.is_store_host(store, ns.node_name, ns.node_id)
    staging = store.staging.node_cache_path if store and store.staging.enabled and not host else None
    # A private context: gunicorn forks workers after this, and they must not share it.
    runtime = ChildRuntime("api", args, ctx=zmq.Context())
    use_skulk_titles(args.title)
    faults.inject("api", "boot")
    try:
        sock = listen_socket(ns.listen, ns.port)
    except OSError as exc:
        log.error("api cannot listen on %s:%d: %s", ns.listen, ns.port, exc.strerror)
        os._exit(exitcodes.BOOT_FAILURE)
    ApiApplication(runtime, sock, ns.workers, ns.threads, graceful_s=3.0, node_id=ns.node_id,
                   timing=StreamTiming(stall_s=ns.stall_timeout, keepalive_s=ns.keepalive),
                   config_file=ns.config_file, store=store, staging_root=staging, listen=ns.listen).run()


main()
