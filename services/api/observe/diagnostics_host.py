"""What the machine says about this node right now (psutil): memory, disk, CPU, addresses, and
the node's process tree. The only part of the diagnostics that reads the system, kept apart so
the rest stays pure.

The tree is found from the root supervisor's pid, which `skulk run` writes into its lock file
(`<run>/skulk.lock`); each process names its role in its title (`skulk: <role>`).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from skulk.services.api.http.schema import (
    ANY_OBJECT,
    BOOLEAN,
    INTEGER,
    NUMBER,
    STRING,
    Schema,
    array,
    enum,
    nullable,
    obj,
)
from skulk.services.api.observe.diagnostics_runners import memory

TITLE = "skulk: "


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a stopped process, SIGSTOP, is alive)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def root_pid(run_dir: Path) -> int | None:
    """The node's root supervisor, from its lock file; else the nearest `skulk: supervisor`
    ancestor of this process."""
    try:
        pid = int((run_dir / "skulk.lock").read_text().split()[0])
        if psutil.pid_exists(pid):
            return pid
    except (OSError, ValueError, IndexError):
        pass
    for proc in psutil.Process().parents():
        try:
            if " ".join(proc.cmdline()).startswith(TITLE + "supervisor"):
                return proc.pid
        except psutil.Error:
            continue
    return None


def service_of(title: str) -> str:
    """`skulk: runner abc` -> `runner`, `skulk: api worker` -> `api worker`; "" when not ours."""
    if not title.startswith(TITLE):
        return ""
    rest = title[len(TITLE):].strip()
    return "runner" if rest.startswith("runner") else rest


def role_of(title: str) -> str:
    """Upstream's coarse role: runner, skulk (our other processes), python or other."""
    service = service_of(title)
    if service:
        return "runner" if service == "runner" else "skulk"
    return "python" if "python" in title.split(" ", 1)[0] else "other"


class ProcessTable:
    """The node's process tree. Keeps its `psutil.Process` objects between calls, because a CPU
    percentage is measured between two looks at the same object."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._lock = threading.Lock()
        self._procs: dict[int, psutil.Process] = {}

    def _tree(self) -> list[psutil.Process]:
        pid = root_pid(self.run_dir)
        if pid is None:
            return [psutil.Process()]
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]

    def _same(self, fresh: psutil.Process) -> psutil.Process:
        """The object kept from an earlier look at this process (not at a reuse of its pid)."""
        kept = self._procs.get(fresh.pid)
        try:
            return kept if kept is not None and kept.create_time() == fresh.create_time() else fresh
        except psutil.Error:
            return fresh

    def rows(self, now: float) -> list[dict[str, Any]]:
        with self._lock:
            try:
                tree = self._tree()
            except psutil.Error:
                tree = []
            procs = {p.pid: self._same(p) for p in tree}
            self._procs = procs
            out = []
            for pid, proc in sorted(procs.items()):
                try:
                    with proc.oneshot():
                        title = " ".join(proc.cmdline()) or proc.name()
                        mem = proc.memory_info()
                        out.append({"pid": pid, "parentPid": proc.ppid(), "role": role_of(title),
                                    "service": service_of(title) or None, "command": title,
                                    "status": proc.status(), "cpuPercent": proc.cpu_percent(None),
                                    "memoryPercent": round(proc.memory_percent(), 3), "rss": mem.rss,
                                    "elapsedSeconds": round(now - proc.create_time(), 3),
                                    "isChildOfSkulk": pid != tree[0].pid})
                except psutil.Error:
                    continue  # exited meanwhile
            return out


def resources(home: Path, gathered: dict[str, Any] | None) -> dict[str, Any]:
    """Upstream's `resources`: what gossip last advertised (`gathered`) and what is true now."""
    vm, swap = psutil.virtual_memory(), psutil.swap_memory()
    try:
        disk = psutil.disk_usage(str(home))
        disk_json = {"path": str(home), "total": memory(disk.total), "available": memory(disk.free)}
    except OSError:
        disk_json = None
    try:
        load = list(os.getloadavg())
    except OSError:
        load = []
    interfaces = [{"name": name, "ipAddress": a.address}
                  for name, addrs in sorted(psutil.net_if_addrs().items())
                  for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)]
    return {"gatheredMemory": gathered,
            "currentMemory": {"ramTotal": memory(vm.total), "ramAvailable": memory(vm.available),
                              "swapTotal": memory(swap.total), "swapAvailable": memory(swap.free)},
            "currentWired": None,  # Linux has no wired memory figure
            "disk": disk_json,
            "system": {"cpuCount": psutil.cpu_count(), "cpuPercent": psutil.cpu_percent(None),
                       "loadAverage": load, "bootTime": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                      time.gmtime(psutil.boot_time()))},
            "network": {"interfaces": interfaces}}


_MEMORY: Schema = obj({"inBytes": INTEGER})
_MEMORY_USAGE: Schema = obj({"ramTotal": _MEMORY, "ramAvailable": _MEMORY, "swapTotal": _MEMORY,
                             "swapAvailable": _MEMORY})
RESOURCES: Schema = obj({
    "gatheredMemory": nullable(_MEMORY_USAGE), "currentMemory": _MEMORY_USAGE, "currentWired": nullable(_MEMORY),
    "disk": nullable(obj({"path": STRING, "total": _MEMORY, "available": _MEMORY})),
    "system": ANY_OBJECT,
    "network": obj({"interfaces": array(obj({"name": STRING, "ipAddress": STRING}))})})
PROCESS: Schema = obj({
    "pid": INTEGER, "parentPid": INTEGER, "role": enum("skulk", "runner", "vector", "python", "other"),
    "service": nullable(STRING), "command": STRING, "status": STRING, "cpuPercent": NUMBER,
    "memoryPercent": NUMBER, "rss": INTEGER, "elapsedSeconds": NUMBER, "isChildOfSkulk": BOOLEAN})
