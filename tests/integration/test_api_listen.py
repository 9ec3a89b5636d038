"""The API's bind after a kill -9 of its arbiter: the predecessor's orphaned workers may still hold
the port for a moment, and only they are waited out (`services/api/http/listen.py`)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import psutil
import pytest

from skulk.services.api.http.listen import is_worker, listen_after_predecessor, listen_socket
from tools.ports import free_port

HOLDER = """
import socket, sys
from setproctitle import setproctitle
setproctitle(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
print("listening", flush=True)
sys.stdin.read()
"""


def hold_port(port: int, title: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(port), title],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "listening"
    return proc


def test_a_leftover_worker_of_this_node_is_killed_and_the_port_taken():
    port = free_port()
    holder = hold_port(port, "skulk: api worker")
    try:
        sock = listen_after_predecessor("127.0.0.1", port, supervisor_pid=os.getpid(),
                                        worker_title="skulk: api worker", wait_s=30.0)
        sock.close()
        holder.wait(timeout=30)  # gone (psutil may have reaped it: then Popen reads 0)
    finally:
        holder.kill()
        holder.wait()


def test_any_other_holder_is_a_boot_failure_at_once():
    port = free_port()
    holder = hold_port(port, "someone else")
    try:
        with pytest.raises(OSError) as caught:
            listen_after_predecessor("127.0.0.1", port, supervisor_pid=os.getpid(),
                                     worker_title="skulk: api worker", wait_s=30.0)
        assert caught.value.errno == errno.EADDRINUSE
        assert holder.poll() is None
        with pytest.raises(OSError):
            listen_socket("127.0.0.1", port)
    finally:
        holder.kill()
        holder.wait()


class _Exiting:
    """A process past releasing its memory: its command line reads empty (`/proc/<pid>/cmdline`)
    while its kernel name and open files are still there."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def cmdline(self) -> list[str]:
        return []


def test_a_worker_on_its_way_out_is_known_by_its_kernel_name():
    port = free_port()
    holder = hold_port(port, "skulk: api worker")
    other = hold_port(free_port(), "someone else")
    try:
        assert is_worker(_Exiting(holder.pid), "skulk: api worker")  # type: ignore[arg-type]
        assert not is_worker(psutil.Process(other.pid), "skulk: api worker")
        assert is_worker(psutil.Process(holder.pid), "skulk: api worker")
    finally:
        for proc in (holder, other):
            proc.kill()
            proc.wait()
