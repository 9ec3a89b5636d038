"""The API's listening socket, bound before gunicorn starts (it is handed over as `fd://`).

A taken port is a clean boot failure at once, with one exception: the workers of this node's
previous API process. When the API's arbiter dies (kill -9, a crash), its workers are orphaned to
the supervisor and killed by the kernel (`PR_SET_PDEATHSIG`), but on a busy machine a worker may
not have run its exit yet when the supervisor has already forked the new API, and its copy of the
socket still holds the port. Those leftovers are found among the supervisor's children, killed,
and waited for (bounded) before the bind is tried once more, so a kill -9 costs one restart, not
a boot failure and its back-off. A dying worker gives up its memory before its files: in that
window its command line reads empty while its socket still holds the port, so it is known by
its kernel name (or by having no command line left), not by its command line alone.
"""

from __future__ import annotations

import errno
import logging
import socket
import time

import psutil

log = logging.getLogger("skulk.api")
LEFTOVER_WAIT_S = 5.0
"""How long the new API waits for its predecessor's killed workers to exit (they only need to be
scheduled once)."""


def listen_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def leftover_workers(supervisor_pid: int, worker_title: str) -> list[psutil.Process]:
    """Live processes among the supervisor's children titled as this node's API workers: the
    supervisor's own children are its roles, so a worker there is an orphan of a dead arbiter."""
    found: list[psutil.Process] = []
    try:
        children = psutil.Process(supervisor_pid).children()
    except psutil.Error:
        return found
    for proc in children:
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and is_worker(proc, worker_title):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def is_worker(proc: psutil.Process, worker_title: str) -> bool:
    """Titled as an API worker, or on its way out: past releasing its memory (no command line
    left) but not yet past closing its files. Its kernel name (`comm`, 15 bytes, set with the
    title) survives until it is reaped."""
    title = " ".join(part for part in proc.cmdline() if part)  # setproctitle pads with NULs
    if title == worker_title:
        return True
    kernel_name = _kernel_name(proc.pid)
    return kernel_name == worker_title[:COMM_LEN] or (not title and kernel_name is not None)


COMM_LEN = 15
"""The kernel keeps a task's name in 16 bytes, NUL included."""


def _kernel_name(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().rstrip("\n")
    except OSError:
        return None


def listen_after_predecessor(host: str, port: int, supervisor_pid: int, worker_title: str,
                             wait_s: float = LEFTOVER_WAIT_S) -> socket.socket:
    """`listen_socket`, waiting out the previous API's workers if they are what holds the port;
    any other holder raises at once."""
    try:
        return listen_socket(host, port)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        leftovers = leftover_workers(supervisor_pid, worker_title)
        if not leftovers:
            raise
    log.info("api: port %d is still held by %d worker(s) of the previous api process (pids %s); "
             "waiting up to %gs for them to exit", port, len(leftovers),
             ", ".join(str(p.pid) for p in leftovers), wait_s)
    for proc in leftovers:
        try:
            proc.kill()
        except psutil.Error:
            pass
    deadline = time.monotonic() + wait_s
    while (alive := [p for p in leftovers if _running(p)]) and time.monotonic() < deadline:
        psutil.wait_procs(alive, timeout=0.05)  # an exited orphan stays a zombie until reaped
    return listen_socket(host, port)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
