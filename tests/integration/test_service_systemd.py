"""A node installed as a systemd user service starts, answers and stops in order. Needs a running
systemd (with a user manager); elsewhere the unit is still checked with `systemd-analyze verify`
and installed under a temporary root (tests/unit/test_service.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skulk.scripts.http_client import request
from tools.ports import free_port

RUNNING = Path("/run/systemd/system").is_dir() and shutil.which("systemctl") is not None and subprocess.run(
    ["systemctl", "--user", "is-system-running"], capture_output=True, text=True).returncode in (0, 1)


@pytest.mark.skipif(not RUNNING, reason="no running systemd user manager on this machine (PID 1 is not systemd)")
def test_a_node_runs_and_stops_in_order_as_a_user_service(tmp_path):
    home, port = tmp_path / "home", free_port()
    cli = [sys.executable, "-m", "skulk.scripts.cli", "service"]
    out = subprocess.run([*cli, "install", "--user", "--home", str(home), "--", "--api-port", str(port),
                          "--cluster-port", str(free_port(pair=True)), "--listen", "127.0.0.1"],
                         capture_output=True, text=True, timeout=120)
    try:
        assert out.returncode == 0, out.stderr
        subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "admin", "wait", "--home", str(home),
                        "--wait", "60"], check=True, timeout=90)
        assert request(f"http://127.0.0.1:{port}/health", timeout=5)["status"] in ("idle", "busy")
    finally:
        subprocess.run([*cli, "uninstall", "--user"], capture_output=True, text=True, timeout=120)
    log = (home / "logs" / "supervisor.log").read_text()
    assert "exited unexpectedly" not in log and "stopped" in log
