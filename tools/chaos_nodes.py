"""The chaos soak's nodes: real `skulk run` processes on loopback, each with its own home,
ports and process group, restartable with the same home (a new process group each time).

Processes are found by the node's process group and their titles (`skulk: <role>`,
`skulk: runner <id>`), never by a broad name, so two soaks on one machine never touch each
other's processes. Every process group a node ever had is remembered: what is left in an old
group after the node was stopped is an orphan.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml
import zmq

from skulk.scripts.admin_client import NodeUnreachable, request
from skulk.wire import endpoints
from skulk.wire.control import AdminCommand, AdminVerb
from skulk.wire.sockets import make_socket
from skulk.wire.topics import EVT_STATE, EVT_SUPERVISOR
from tools.ports import free_port

TITLE = "skulk: "
RUNNER_TITLE = "skulk: runner "


@dataclass(frozen=True)
class Proc:
    """One live process of a node: its pid, title and start time (psutil's identity check)."""

    pid: int
    title: str
    created: float

    @property
    def role(self) -> str:
        """`master`, `api worker`, `runner`, `supervisor`, ... ("" when the title is not Skulk's)."""
        if not self.title.startswith(TITLE):
            return ""
        return "runner" if self.title.startswith(RUNNER_TITLE) else self.title[len(TITLE):]

    @property
    def runner_id(self) -> str:
        return self.title[len(RUNNER_TITLE):] if self.title.startswith(RUNNER_TITLE) else ""


def group_procs(pgid: int) -> list[Proc]:
    """Every live (non-zombie) process of a process group, with its title."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "create_time", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE or os.getpgid(p.pid) != pgid:
                continue
            title = " ".join(p.info["cmdline"] or []).strip()
            out.append(Proc(p.pid, title, p.info["create_time"]))
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def signal_proc(proc: Proc, sig: int) -> bool:
    """Send `sig` to exactly that process (never to a pid reused since): False when it is gone."""
    try:
        p = psutil.Process(proc.pid)
        if p.create_time() != proc.created:
            return False
        p.send_signal(sig)
        return True
    except psutil.Error:
        return False


def listening_ports(procs: list[Proc]) -> set[int]:
    """The TCP ports these processes listen on."""
    ports = set()
    for proc in procs:
        try:
            for conn in psutil.Process(proc.pid).net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    ports.add(conn.laddr.port)
        except psutil.Error:
            continue
    return ports


def http_json(url: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
    """(status, JSON body); (0, None) when nothing answers."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        try:
            return err.code, json.loads(err.read() or b"null")
        except ValueError:
            return err.code, None
    except (OSError, ValueError):
        return 0, None


@dataclass
class ChaosNode:
    name: str
    home: Path
    namespace: str
    config: dict[str, Any]
    api_port: int = field(default_factory=free_port)
    cluster_port: int = field(default_factory=lambda: free_port(pair=True))
    peers: list[int] = field(default_factory=list)  # the other nodes' cluster ports
    proc: subprocess.Popen[bytes] | None = None
    groups: list[int] = field(default_factory=list)  # every process group this node has had
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def pgid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def start(self) -> None:
        """Launch `skulk run` with this node's home and ports, in a new process group."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "skulk.yaml").write_text(yaml.safe_dump(self.config))
        argv = [sys.executable, "-m", "skulk.scripts.cli", "run", "--home", str(self.home),
                "--node-name", self.name, "--api-port", str(self.api_port),
                "--cluster-port", str(self.cluster_port), "--listen", "127.0.0.1",
                "--namespace", self.namespace]
        if self.peers:
            argv += ["--bootstrap-peers", ",".join(f"127.0.0.1:{p}" for p in self.peers)]
        env = dict(os.environ, PYTHONUNBUFFERED="1", OPENBLAS_NUM_THREADS="1")
        env.pop("SKULK_HOME", None)
        with open(self.home / "node.out", "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        self.groups.append(self.proc.pid)
        self.starts += 1

    def wait_booted(self, timeout: float) -> bool:
        """True once the supervisor says every child is running (its `wait` verb)."""
        try:
            reply = request(self.home, AdminCommand(verb=AdminVerb.WAIT, timeout_s=timeout), timeout_s=5.0, retries=1)
        except NodeUnreachable:
            return False
        return reply.ok

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def procs(self) -> list[Proc]:
        return group_procs(self.pgid) if self.proc is not None else []

    def leftovers(self) -> dict[int, list[Proc]]:
        """Processes still alive in groups this node had before its current one."""
        old = [g for g in self.groups if g != self.pgid or not self.running()]
        return {g: procs for g in old if (procs := group_procs(g))}

    def kill_group(self, pgid: int | None = None) -> None:
        """SIGKILL a whole process group (default: the current one) and reap the root."""
        try:
            os.killpg(pgid or self.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.proc is not None and (pgid is None or pgid == self.pgid):
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def stop(self, timeout: float = 30.0) -> int | None:
        """An orderly stop (SIGTERM to the root, as an operator would); SIGKILL after `timeout`.
        The root's exit code, or None when it had to be killed."""
        if not self.running():
            return self.exit_code()
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            return None

    def node_id(self) -> str | None:
        status, body = http_json(f"{self.url}/node_id", timeout=5)
        return body if status == 200 and isinstance(body, str) else None

    def state(self) -> dict[str, Any] | None:
        status, body = http_json(f"{self.url}/state", timeout=5)
        return body if status == 200 and isinstance(body, dict) else None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join((self.home / "node.out").read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


class BusTicks:
    """Wake-ups for re-checking the cluster: a SUB on every node's bus capture socket for state
    events (and the state head each node publishes every second) and process lifecycle events.
    A restarted node binds the same ipc path again, and zmq reconnects by itself."""

    TOPICS = (EVT_STATE.prefix, EVT_SUPERVISOR.prefix)

    def __init__(self, nodes: list[ChaosNode]) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context.instance()
        self.poller = zmq.Poller()
        self.socks = []
        for node in nodes:
            run = endpoints.run_dir(node.home.resolve())
            sock = make_socket(self.ctx, zmq.SUB, hwm=1000, connect=endpoints.bus_capture(run),
                               subscribe=self.TOPICS)
            self.poller.register(sock, zmq.POLLIN)
            self.socks.append(sock)

    def wait(self, timeout: float) -> bool:
        """Block until a node publishes something (True) or `timeout` passes (False); drains
        what arrived, so each call waits for news."""
        events = dict(self.poller.poll(int(max(0.0, timeout) * 1000)))
        for sock in self.socks:
            if sock in events:
                for _ in range(10000):
                    if not sock.poll(0, zmq.POLLIN):
                        break
                    sock.recv_multipart()
        return bool(events)

    def close(self) -> None:
        for sock in self.socks:
            self.poller.unregister(sock)
            sock.close(0)
