"""One function per well-known endpoint, so no process spells an address by hand.

Node-local endpoints are `ipc://` files under the node's run dir. ipc paths are limited
(about 107 bytes on Linux, 103 on macOS), so a run dir that would be too long moves to a
short per-home directory under the system temp dir.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

IPC_PATH_BUDGET = 100
_LONGEST_NAME = "control.sock"


def run_dir(home: Path) -> Path:
    """Where this node's ipc sockets and lock live."""
    preferred = home / "run"
    if len(str(preferred / _LONGEST_NAME)) <= IPC_PATH_BUDGET:
        return preferred
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"skulk-{os.getuid()}-{digest}"


def _ipc(run: Path, name: str) -> str:
    return f"ipc://{run / name}"


def supervisor_control(run: Path) -> str:
    """Supervisor ROUTER for admin verbs (CLI REQ connects)."""
    return _ipc(run, "control.sock")


def supervisor_notify(run: Path) -> str:
    """Supervisor PULL for ChildReady / Heartbeat (every child PUSH connects)."""
    return _ipc(run, "notify.sock")


def bus_in(run: Path) -> str:
    """Bus XSUB: every service's PUB connects here."""
    return _ipc(run, "bus-in.sock")


def bus_out(run: Path) -> str:
    """Bus XPUB: node-local subscribers connect here."""
    return _ipc(run, "bus-out.sock")


def bus_capture(run: Path) -> str:
    """Bus capture PUB for the tap: lossy by design, so a slow tap never slows the node."""
    return _ipc(run, "tap.sock")


def eventlog_in(run: Path) -> str:
    """Eventlog PULL: the API's chunk and request records (wire/api_events.py)."""
    return _ipc(run, "eventlog-in.sock")


def master_local(run: Path) -> str:
    """Master ROUTER for this node's API: commands and state snapshots."""
    return _ipc(run, "master.sock")


def tcp(host: str, port: int) -> str:
    return f"tcp://{host}:{port}"
