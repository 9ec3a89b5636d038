"""The supervisor's side of the zygote (`zygote.py`): start it, ask it for children, and know
when not to.

A forked child is the supervisor's own child (the supervisor is a Linux child subreaper), so it
is reaped, signalled and probed exactly as a spawned one. Every failure here (no subreaper on
this platform, the zygote late, dead or refusing) means the caller spawns a fresh interpreter
instead: a node never depends on the zygote to start.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

from skulk.supervisor.handle import Signalled

log = logging.getLogger("skulk.supervisor")

PR_SET_CHILD_SUBREAPER = 36
REPLY_TIMEOUT_S = 10.0
"""A fork takes milliseconds; a zygote this late to answer one is given up on."""


def become_subreaper() -> bool:
    """Linux: orphaned descendants (the zygote's grandchildren) become our children."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class ForkedChild(Signalled):
    """A child the zygote forked: the same face as `ChildProcess` (pid, poll, terminate, kill).
    `standby`: it waited as a standby, its engine imported, before it became this child."""

    def __init__(self, pid: int, standby: bool = False) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.forked = True
        self.standby = standby

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: gone, with no status to give
                self.returncode = 0
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)  # -N for signal N, as Popen
        return self.returncode


class ForkedZygoteProcess(ForkedChild):
    """A zygote forked from the supervisor (`zygote_fork.py`), with the `wait` a started one's
    `Popen` has."""

    def wait(self, timeout: float) -> int | None:
        """Its exit code once it has exited, waiting up to `timeout` on its pidfd (readable at its
        exit); None if it is still there."""
        if self.poll() is None:
            try:
                fd = os.pidfd_open(self.pid)
            except OSError:  # already reaped elsewhere, or a kernel without pidfds
                return self.poll()
            try:
                select.select([fd], [], [], timeout)
            finally:
                os.close(fd)
        return self.poll()


class Zygote:
    """One node's zygote process and the channel to it."""

    def __init__(self, proc: subprocess.Popen[bytes] | ForkedZygoteProcess, channel: socket.socket,
                 env: Mapping[str, str]) -> None:
        self.proc = proc
        self.channel = channel
        self.env = dict(env)
        self.ready = False
        self.broken = ""
        self.started = time.monotonic()
        self._buffer = b""

    @classmethod
    def start(cls, packages: Iterable[str], env: Mapping[str, str]) -> Zygote | None:
        """Start a zygote preloading what the children's packages (`python -m <package>`) import
        (None where this platform cannot use one).
        `env` is every child's environment; the caller blocks SIGINT/SIGHUP around this call, as
        around any spawn, so the zygote's children inherit them blocked."""
        if not become_subreaper():
            return None
        ours, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen([sys.executable, "-m", "skulk.supervisor.zygote", str(theirs.fileno()),
                                     ",".join(packages)], env=dict(env), close_fds=True,
                                    pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        except OSError as exc:
            log.warning("zygote not started (%s): every child starts a fresh interpreter", exc)
            ours.close()
            return None
        finally:
            theirs.close()
        return cls(proc, ours, env)

    def fileno(self) -> int:
        return self.channel.fileno()

    def wait_ready(self, deadline: float, wake_fd: int | None = None) -> bool:
        """Block until the zygote has preloaded (True), or it failed, the deadline passed or
        `wake_fd` became readable (a signal for the loop): False, and children start fresh."""
        while not self.ready and not self.broken:
            left = deadline - time.monotonic()
            if left <= 0:
                self._give_up("not ready by its deadline")
                break
            fds = [self.channel.fileno()] + ([wake_fd] if wake_fd is not None else [])
            readable, _, _ = select.select(fds, [], [], min(left, 1.0))
            if wake_fd is not None and wake_fd in readable:
                return False
            if self.proc.poll() is not None:
                self._give_up(f"exited ({self.proc.returncode}) while preloading")
                break
            if self.channel.fileno() in readable:
                reply = self._read_line(left)
                if reply is None:
                    break
                if reply.get("ready"):
                    self.ready = True
                else:
                    self._give_up(f"unsafe to fork from: {'; '.join(reply.get('problems', []))}")
                for failed in reply.get("failed", []):
                    log.warning("zygote could not preload %s (children import it themselves)", failed)
        return self.ready

    def spawn(self, module: str, argv: list[str], env: Mapping[str, str]) -> ForkedChild | None:
        """A child forked from the zygote, or None (the caller spawns it fresh)."""
        if not self.ready or self.broken:
            return None
        if dict(env) != self.env:
            return None
        try:
            self.channel.sendall(json.dumps({"module": module, "argv": argv, "env": self.env}).encode() + b"\n")
        except OSError as exc:
            self._give_up(f"channel lost: {exc}")
            return None
        reply = self._read_line(REPLY_TIMEOUT_S)
        if reply is None:
            return None
        if "pid" not in reply:
            log.warning("zygote refused %s: %s (starting it fresh)", module, reply.get("error", "?"))
            return None
        return ForkedChild(int(reply["pid"]))

    def standby(self, module: str, preimport: tuple[str, ...], env: Mapping[str, str]) -> Standby | None:
        """A process forked to become a later `module` child, importing `preimport` meanwhile."""
        if not self.ready or self.broken or dict(env) != self.env:
            return None
        try:
            self.channel.sendall(json.dumps({"module": module, "standby": True, "preimport": list(preimport),
                                             "env": self.env}).encode() + b"\n")
        except OSError as exc:
            self._give_up(f"channel lost: {exc}")
            return None
        fds: list[int] = []
        reply = self._read_line(REPLY_TIMEOUT_S, fds)
        if reply is None or "pid" not in reply or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            if reply is not None:
                log.warning("zygote made no standby for %s: %s", module, reply.get("error", "no socket"))
            return None
        return Standby(ForkedChild(int(reply["pid"]), standby=True), socket.socket(fileno=fds[0]),
                       dict(env), time.monotonic())

    def _read_line(self, timeout_s: float, fds: list[int] | None = None) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            readable, _, _ = select.select([self.channel], [], [], max(0.0, left))
            if not readable:
                self._give_up(f"no answer in {timeout_s:g}s")
                return None
            try:
                data, got, _flags, _addr = socket.recv_fds(self.channel, 65536, 4)
            except OSError as exc:
                data, got = b"", []
                log.debug("zygote channel: %s", exc)
            if fds is not None:
                fds.extend(got)
            else:
                for fd in got:
                    os.close(fd)
            if not data:
                self._give_up("closed its channel")
                return None
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError:
            self._give_up("answered with something that is not JSON")
            return None
        return reply if isinstance(reply, dict) else None

    def _give_up(self, why: str) -> None:
        if not self.broken:
            self.broken = why
            log.warning("zygote %s: every child starts a fresh interpreter from now on", why)
            self.close()

    def close(self) -> None:
        """Stop the zygote (its children are ours and live on) and reap it."""
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


class Standby:
    """A forked process that becomes a later child (a runner), importing mlx and mlx-lm from the
    moment it is made: that part of the child's start is paid before, or while, it is asked for.
    Used once."""

    def __init__(self, proc: ForkedChild, sock: socket.socket, env: dict[str, str], created: float) -> None:
        self.proc = proc
        self.sock = sock
        self.env = env
        self.created = created

    def assign(self, argv: list[str], env: Mapping[str, str]) -> ForkedChild | None:
        """Make it the child with these arguments (it reads them once its imports are done); None,
        and it is let go, if it cannot be."""
        if dict(env) != self.env or self.proc.poll() is not None:
            self.close()
            return None
        try:
            self.sock.sendall(json.dumps({"argv": argv}).encode() + b"\n")
        except OSError:
            self.close()
            return None
        self.sock.close()
        return self.proc

    def close(self) -> None:
        """Not needed any more: its socket closed (it exits by itself), killed if still there."""
        self.sock.close()
        self.proc.kill()
