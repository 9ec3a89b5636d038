"""`skulk service`: the unit and the plist it writes, and install/uninstall under a root dir."""

from __future__ import annotations

import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skulk.scripts.service import MARK, launchd_plist, ours, systemd_unit, target


def skulk_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "service", *args], capture_output=True,
                          text=True, timeout=60)


def test_the_unit_runs_the_node_in_the_foreground_with_upstreams_restart():
    unit = systemd_unit("/opt/skulk", Path("/srv/node"), ["--api-port", "52415"], user=False)
    assert unit.startswith(MARK) and "ExecStart=/opt/skulk run --home /srv/node --api-port 52415" in unit
    assert "RestartSec=10" in unit and "KillMode=mixed" in unit and "WantedBy=multi-user.target" in unit
    user = systemd_unit("/opt/skulk", Path("/srv/node"), [], user=True)
    assert "WantedBy=default.target" in user and "network-online" not in user


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_the_unit_passes_systemd_analyze_verify(tmp_path):
    skulk = shutil.which("skulk") or str(Path(sys.executable).with_name("skulk"))
    unit = tmp_path / "skulk.service"
    unit.write_text(systemd_unit(skulk, tmp_path / "home", ["--api-port", "52415"], user=False))
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_the_plist_round_trips_with_the_keys_launchd_needs():
    data = plistlib.loads(launchd_plist("/opt/skulk", Path("/Users/me/.skulk"), ["--listen", "0.0.0.0"]))
    assert data["Label"] == "dev.skulk.node" and data["RunAtLoad"] is True
    assert data["ProgramArguments"] == ["/opt/skulk", "run", "--home", "/Users/me/.skulk", "--listen", "0.0.0.0"]
    assert data["KeepAlive"] == {"SuccessfulExit": False} and data["ThrottleInterval"] == 10
    assert data["StandardErrorPath"] == "/Users/me/.skulk/logs/launchd.err.log"
    assert ours(launchd_plist("/opt/skulk", Path("/h"), [])) and not ours(b"[Unit]\nDescription=someone else\n")


def test_where_each_manager_reads_its_file(tmp_path):
    assert target("Linux", True, tmp_path) == tmp_path / ".config/systemd/user/skulk.service"
    assert target("Linux", False, tmp_path) == tmp_path / "etc/systemd/system/skulk.service"
    assert target("Darwin", True, tmp_path) == tmp_path / "Library/LaunchAgents/dev.skulk.node.plist"


@pytest.mark.skipif(sys.platform != "linux",
                    reason="installs the systemd unit a Linux machine gets (macOS gets a launchd plist)")
def test_install_is_idempotent_never_replaces_a_foreign_unit_and_uninstall_undoes_it(tmp_path):
    home = tmp_path / "home"
    first = skulk_cli("install", "--user", "--root", str(tmp_path), "--home", str(home), "--", "--api-port", "5")
    assert first.returncode == 0 and "wrote" in first.stdout and "undo: skulk service uninstall --user" in first.stdout
    unit = tmp_path / ".config/systemd/user/skulk.service"
    assert f"run --home {home} --api-port 5" in unit.read_text()
    from skulk.scripts.service import installed_port
    assert installed_port(unit) == 5
    again = skulk_cli("install", "--user", "--root", str(tmp_path), "--home", str(home), "--", "--api-port", "5")
    assert again.returncode == 0 and "already installed" in again.stdout
    assert skulk_cli("uninstall", "--user", "--root", str(tmp_path)).returncode == 0 and not unit.exists()
    unit.write_text("[Unit]\nDescription=written by hand\n")
    refused = skulk_cli("install", "--user", "--root", str(tmp_path), "--home", str(home))
    assert refused.returncode == 1 and "not written by skulk" in refused.stderr
    assert skulk_cli("uninstall", "--user", "--root", str(tmp_path)).returncode == 1 and unit.exists()
