"""The node's zygote forked from the supervisor itself, once the supervisor has built its tree,
instead of started as a fresh interpreter: it begins with every module the supervisor has imported
(the wire, the cluster state, zmq, psutil: about half of what the roles import) and imports only
the rest. About 0.4 s of CPU less at every start and in-place restart of a node (0.45 instead of
0.84 on a 2-core x86 VM), and the roles' wait for the zygote shortened by as much.

A fork is only a fresh interpreter's equal if the supervisor has nothing yet that a child must not
inherit, so it is made before the supervisor's loop (no zmq context, no thread, no signal handler
of ours) and refused, for the fresh-interpreter zygote, when anything unexpected is open. The
child sheds what the supervisor did have: its log handlers and their files, the home's lock, the
environment (every child's, as `child_env` makes it), buffered standard streams. Its grandchildren
run their role below the supervisor's stack frames and must never return into them: they end as
an interpreter ends (`zygote.run_role_and_exit`).
"""

from __future__ import annotations

import io
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterable, Mapping
from typing import TextIO

from skulk.supervisor import zygote
from skulk.supervisor.zygote_client import ForkedZygoteProcess, Zygote, become_subreaper

log = logging.getLogger("skulk.supervisor")


def open_fds() -> set[int]:
    """This process's open descriptors (empty where /proc cannot tell); the one `listdir` used
    to read them is closed again by the time each is checked."""
    try:
        listed = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return set()
    out = set()
    for fd in listed:
        try:
            os.fstat(fd)
        except OSError:
            continue
        out.add(fd)
    return out


def log_files() -> set[int]:
    """The descriptors the root logger's handlers write to (stderr's included)."""
    fds = set()
    for handler in logging.getLogger().handlers:
        stream = getattr(handler, "stream", None)
        try:
            fds.add(stream.fileno())  # type: ignore[union-attr]
        except (AttributeError, OSError, ValueError):
            continue
    return fds


def fork(packages: Iterable[str], env: Mapping[str, str], closable: Iterable[int] = ()) -> Zygote | None:
    """The zygote as a fork of this process (None: not here, or not safe now; the caller starts
    one as a fresh interpreter). `closable`: descriptors of ours the zygote closes (the lock);
    any other open one, beyond the standard streams and the log files, refuses the fork. The
    caller blocks SIGINT/SIGHUP around this call, as around any spawn."""
    if not sys.platform.startswith("linux"):  # no zygote at all there (`zygote_client.become_subreaper`)
        return None
    problems = zygote.fork_safe_problems()
    listed = open_fds()
    stray = listed - {0, 1, 2} - set(closable) - log_files()
    if not listed or stray:
        problems.append(f"descriptors {sorted(stray)} open" if stray else "/proc/self/fd unreadable")
    if problems or not become_subreaper():
        if problems:
            log.info("zygote not forked from the supervisor (%s): started fresh", "; ".join(problems))
        return None
    ours, theirs = socket.socketpair()
    _flush()
    pid = os.fork()
    if pid == 0:
        try:
            _become_zygote(theirs, ours, list(packages), dict(env), set(closable))
        finally:
            os._exit(1)  # never back into the supervisor's frames
    theirs.close()
    return Zygote(ForkedZygoteProcess(pid), ours, env)


def _become_zygote(theirs: socket.socket, ours: socket.socket, packages: list[str], env: dict[str, str],
                   closable: set[int]) -> None:
    """In the forked child: shed the supervisor's state, then serve as the zygote; never returns."""
    code = 1
    try:
        ours.close()
        root = logging.getLogger()
        for handler in list(root.handlers):
            handler.close()  # its file's descriptor, this process's copy
        root.handlers.clear()
        for fd in closable:
            try:
                os.close(fd)
            except OSError:
                pass
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD, signal.SIGQUIT):
            if callable(signal.getsignal(sig)):
                signal.signal(sig, signal.SIG_DFL)
        if callable(signal.getsignal(signal.SIGINT)):
            signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(env)
        null = os.open(os.devnull, os.O_RDONLY)  # a child's stdin, as the supervisor spawns one
        if null != 0:  # (0 itself where the supervisor was started with its stdin closed)
            os.dup2(null, 0)
            os.close(null)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - lives as long as the process
        if not sys.flags.safe_path:  # `python -m`'s first entry, not the `skulk` script's directory
            sys.path[0] = os.getcwd()
        if env.get("PYTHONUNBUFFERED"):  # as `python -u` makes them: nothing waits in a buffer
            sys.stdout = _unbuffered(sys.stdout)
            sys.stderr = _unbuffered(sys.stderr)
        role = zygote.main([str(theirs.fileno()), ",".join(packages)])
        if role is not None:
            zygote.run_role_and_exit(role)
        code = 0
    except BaseException:  # noqa: BLE001 - the zygote's own failure: reported, and it ends here
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()


def _unbuffered(stream: TextIO | None) -> TextIO | None:
    if stream is None:  # started with that descriptor closed
        return None
    stream.flush()
    raw = open(stream.fileno(), "wb", buffering=0, closefd=False)  # noqa: SIM115 - lives as long as the process
    return io.TextIOWrapper(raw, encoding=stream.encoding, errors=getattr(stream, "errors", None), write_through=True)
