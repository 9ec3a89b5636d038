"""Real nodes for tests: each its own `--home`, free loopback ports and process group.

Waiting is always on a real signal with a deadline: the supervisor's `wait` verb, a bus
event on the capture socket, or a process exit. Deadlines are given as on a fast idle machine and
stretched here for this one (`patience.py`). Teardown SIGKILLs every process group that
was started, even when the test failed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml
import zmq

from skulk.scripts.admin_client import NodeUnreachable, request
from skulk.wire import codec, endpoints
from skulk.wire.control import AdminCommand, AdminReply, AdminVerb, ChildStatus
from skulk.wire.message import Message
from skulk.wire.sockets import make_socket
from skulk.wire.topics import EVERY_EVENT
from tests.integration.patience import patience
from tools.ports import free_port


@dataclass
class Node:
    home: Path
    api_port: int
    cluster_port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def admin(self, verb: AdminVerb, target: str = "", **kw: Any) -> AdminReply:
        timeout = kw.pop("request_timeout", 5.0)
        return request(self.home, AdminCommand(verb=verb, target=target, **kw), timeout_s=timeout)

    def back_in_place(self, old_api: int) -> bool:
        """After an in-place restart: the same root process, ready, with a new API process (the
        control socket is away while the image is replaced: not yet)."""
        try:
            reply = self.admin(AdminVerb.WAIT, timeout_s=2.0, request_timeout=1.0)
        except Exception:  # noqa: BLE001 - any failure to reach it means "not back yet"
            return False
        return reply.ok and reply.root_pid == self.pid and {c.id: c for c in reply.children}["api"].pid != old_api

    def wait_ready(self, target: str = "", min_restarts: int = 0, timeout: float = 20.0) -> AdminReply:
        """The supervisor's `wait` verb, asked in slices so that a node that has exited fails the
        wait at once instead of at its (stretched) deadline."""
        deadline = time.monotonic() + patience(timeout)
        while True:
            left = deadline - time.monotonic()
            try:
                reply = self.admin(AdminVerb.WAIT, target, min_restarts=min_restarts,
                                   timeout_s=max(0.0, min(left, 5.0)), request_timeout=2.0)
            except NodeUnreachable:  # not answering yet (booting, or exec-ing in place)
                reply = None
            if reply is not None and (reply.ok or left <= 5.0):
                break
            code = self.proc.poll()
            assert code is None, f"the node exited ({code}) before {target or 'it'} was ready\n{self.log_tail()}"
            assert time.monotonic() < deadline, \
                f"{target or 'node'} not ready in {patience(timeout):.0f}s\n{self.log_tail()}"
        assert reply.ok, f"{target or 'node'} not ready in {patience(timeout):.0f}s: {reply.message}\n{self.log_tail()}"
        return reply

    def status(self) -> dict[str, ChildStatus]:
        return {c.id: c for c in self.admin(AdminVerb.STATUS).children}

    def group_pids(self) -> list[int]:
        """Every live process of this node's process group (the node runs in its own session)."""
        out = []
        for p in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(p.pid) == self.proc.pid and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p.pid)
            except (ProcessLookupError, psutil.Error):
                continue
        return out

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def failure_logs(self, lines: int = 25) -> str:
        """What a failed test's report shows of this node: its supervisor's output and the tail of
        each role's log (a CI failure is read from its report alone)."""
        parts = [f"== {self.log_path}\n{self.log_tail(2 * lines)}"]
        for log in sorted((self.home / "logs").glob("*.log")):
            try:
                tail = log.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            parts.append(f"== {log.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def kill_all(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def start_node(tmp: Path, name: str = "node", config: dict[str, Any] | None = None,
               env: dict[str, str] | None = None, ready: bool = True,
               args: tuple[str, ...] = (), models: dict[str, Path] | None = None,
               command: tuple[str, ...] = (sys.executable, "-m", "skulk.scripts.cli"),
               node_name: str = "") -> Node:
    """`name` is the node's home dir under `tmp`. Nodes are named as a user's are, by nobody:
    every node on this machine starts under the host name and all but the first take their
    derived names; `node_name` gives one (`--node-name`) where a test points config at it.
    `command` is the CLI to run (default: this interpreter's skulk; a wheel test passes an
    installed `skulk` script)."""
    home = tmp / name
    home.mkdir(parents=True, exist_ok=True)
    if config:
        (home / "skulk.yaml").write_text(yaml.safe_dump(config))
    for dir_name, source in (models or {}).items():
        (home / "models").mkdir(exist_ok=True)
        link = home / "models" / dir_name
        if not link.exists():
            link.symlink_to(source, target_is_directory=True)
    api_port, cluster_port = free_port(), free_port(pair=True)
    log_path = home / "node.out"
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    full_env.pop("SKULK_HOME", None)
    argv = [*command, "run", "--home", str(home), *(("--node-name", node_name) if node_name else ()),
            "--api-port", str(api_port), "--cluster-port", str(cluster_port), "--listen", "127.0.0.1",
            *args]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                start_new_session=True)
    node = Node(home, api_port, cluster_port, proc, log_path, env or {})
    if ready:
        node.wait_ready(timeout=30)
    return node


class BusWatcher:
    """A SUB on the node's bus capture socket: wait for a matching message, with a deadline."""

    def __init__(self, node: Node, prefix: bytes = b"") -> None:
        self.ctx: zmq.Context[Any] = zmq.Context.instance()
        run = endpoints.run_dir(node.home.resolve())
        self.sock = make_socket(self.ctx, zmq.SUB, hwm=100000, connect=endpoints.bus_capture(run),
                                subscribe=(prefix,))

    def messages(self, timeout: float, stretch: bool = True) -> Iterator[tuple[bytes, Message]]:
        """Messages for nominally `timeout` seconds (stretched for this machine: `patience`)."""
        deadline = time.monotonic() + (patience(timeout) if stretch else timeout)
        while (left := deadline - time.monotonic()) > 0:
            if self.sock.poll(int(left * 1000) + 1, zmq.POLLIN):
                topic, payload = self.sock.recv_multipart()
                yield topic, codec.decode(payload)

    def settle(self, window: float) -> None:
        """Read whatever arrives within `window` seconds (a burst of messages: one re-check
        for all of them instead of one each)."""
        deadline = time.monotonic() + window
        while (left := deadline - time.monotonic()) > 0 and self.sock.poll(int(left * 1000) + 1, zmq.POLLIN):
            self.sock.recv_multipart()

    def wait_for(self, predicate: Any, timeout: float) -> Message:
        for _topic, msg in self.messages(timeout):
            if predicate(msg):
                return msg
        raise AssertionError(f"no matching bus message within {patience(timeout):.0f}s")

    def close(self) -> None:
        self.sock.close(0)


RECHECK_WINDOW_S = 0.1
"""A busy cluster publishes dozens of events a second (a restart, a placement): `wait_until`
re-runs its check once for each burst, not once per message, so that the checks (a state read
of every node, each) do not take the machine's cores from the nodes they wait on."""


def wait_until(watch: Node, check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Re-run `check` on every burst of bus messages of `watch` until it returns something truthy."""
    watcher = BusWatcher(watch, EVERY_EVENT)
    timeout = patience(timeout)
    deadline = time.monotonic() + timeout
    try:
        while True:
            result = check()
            if result:
                return result
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{what}: not within {timeout:.0f}s")
            if next(watcher.messages(left, stretch=False), None) is not None:
                watcher.settle(min(RECHECK_WINDOW_S, max(0.0, deadline - time.monotonic())))
    finally:
        watcher.close()
