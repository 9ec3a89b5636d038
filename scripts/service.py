"""`skulk service install | uninstall | status | logs`: run a node under the machine's service
manager, a systemd unit on Linux (user or system) or a launchd agent on macOS.

The unit runs `skulk run --home <home> <the node's own flags>` in the foreground: restarted 10 s
after a failure (upstream's `RestartSec=10`), left down after an orderly exit, stopped with
SIGTERM to the root only (an orderly stop: the root stops its children in reverse order).
`install` is idempotent, refuses to replace a file it did not write (the first line, or the
plist's `SkulkWrittenBy` key, says who wrote it), and prints what it did and how to undo it.
Files are rendered by pure functions; `--root` writes under another directory and touches no
service manager (tests, packaging).
"""

from __future__ import annotations

import argparse
import os
import platform
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

MARK = "# written by `skulk service install`; `skulk service uninstall` removes it"
UNIT = "skulk.service"
LABEL = "dev.skulk.node"
MANAGER_TIMEOUT_S = 30.0


def systemd_unit(skulk: str, home: Path, args: list[str], user: bool) -> str:
    command = " ".join([skulk, "run", "--home", str(home), *args])
    return "\n".join([
        MARK,
        "[Unit]",
        "Description=Skulk inference node",
        *(() if user else ("After=network-online.target", "Wants=network-online.target")),
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={command}",
        "Restart=on-failure",
        "RestartSec=10",
        "RestartPreventExitStatus=78",
        "KillMode=mixed",
        "TimeoutStopSec=120",
        "Environment=PYTHONUNBUFFERED=1",
        "",
        "[Install]",
        f"WantedBy={'default.target' if user else 'multi-user.target'}",
        "",
    ])


def launchd_plist(skulk: str, home: Path, args: list[str]) -> bytes:
    return plistlib.dumps({
        "Label": LABEL, "SkulkWrittenBy": MARK.lstrip("# "),
        "ProgramArguments": [skulk, "run", "--home", str(home), *args],
        "RunAtLoad": True, "KeepAlive": {"SuccessfulExit": False}, "ThrottleInterval": 10,
        "ExitTimeOut": 120, "ProcessType": "Interactive",
        "StandardOutPath": str(home / "logs" / "launchd.out.log"),
        "StandardErrorPath": str(home / "logs" / "launchd.err.log"),
        "EnvironmentVariables": {"PYTHONUNBUFFERED": "1"},
    })


def ours(content: bytes) -> bool:
    """Whether `skulk service install` wrote this file."""
    if content.startswith(MARK.encode()):
        return True
    try:
        return plistlib.loads(content).get("SkulkWrittenBy") == MARK.lstrip("# ")
    except Exception:  # noqa: BLE001 - not a plist: someone else's unit
        return False


def target(system: str, user: bool, root: Path | None) -> Path:
    base = root if root is not None else (Path.home() if user or system == "Darwin" else Path("/"))
    if system == "Darwin":
        return base / "Library" / "LaunchAgents" / f"{LABEL}.plist"
    return base / (".config/systemd/user" if user else "etc/systemd/system") / UNIT


def _manager(system: str, user: bool, *verb: str) -> subprocess.CompletedProcess[str] | None:
    if system == "Darwin":
        cmd = ["launchctl", *verb]
    else:
        cmd = ["systemctl", *(["--user"] if user else []), *verb]
    if shutil.which(cmd[0]) is None:
        return None
    return subprocess.run(cmd, capture_output=True, text=True, timeout=MANAGER_TIMEOUT_S)


def install(ns: argparse.Namespace) -> int:
    ns.args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    system, path = platform.system(), target(platform.system(), ns.user, ns.root)
    skulk = shutil.which("skulk") or str(Path(sys.executable).with_name("skulk"))
    home = Path(ns.home or os.environ.get("SKULK_HOME") or Path.home() / ".skulk").expanduser().absolute()
    content = (launchd_plist(skulk, home, ns.args) if system == "Darwin"
               else systemd_unit(skulk, home, ns.args, ns.user).encode())
    if path.exists():
        old = path.read_bytes()
        if not ours(old):
            print(f"skulk: {path} exists and was not written by skulk; not replacing it", file=sys.stderr)
            return 1
        if old == content:
            print(f"already installed: {path}")
            return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(content)
    tmp.replace(path)
    print(f"wrote {path}: runs `{skulk} run --home {home}{' ' if ns.args else ''}{' '.join(ns.args)}`")
    if ns.root is None and not ns.no_start:
        if system == "Darwin":
            _manager(system, ns.user, "load", "-w", str(path))
        else:
            _manager(system, ns.user, "daemon-reload")
            _manager(system, ns.user, "enable", "--now", UNIT)
        print("started it; undo: skulk service uninstall" + (" --user" if ns.user else ""))
    else:
        print("undo: skulk service uninstall" + (" --user" if ns.user else "") +
              (f" --root {ns.root}" if ns.root is not None else ""))
    return 0


def uninstall(ns: argparse.Namespace) -> int:
    system, path = platform.system(), target(platform.system(), ns.user, ns.root)
    if not path.exists():
        print(f"not installed: {path}")
        return 0
    if not ours(path.read_bytes()):
        print(f"skulk: {path} was not written by skulk; leaving it", file=sys.stderr)
        return 1
    if ns.root is None:
        if system == "Darwin":
            _manager(system, ns.user, "unload", "-w", str(path))
        else:
            _manager(system, ns.user, "disable", "--now", UNIT)
    path.unlink()
    if ns.root is None and system != "Darwin":
        _manager(system, ns.user, "daemon-reload")
    print(f"removed {path}")
    return 0


def status(ns: argparse.Namespace) -> int:
    """The service manager's word, then the node's own (`/health` on its API port)."""
    from skulk.node import config
    from skulk.scripts.http_client import request

    system = platform.system()
    path = target(system, ns.user, ns.root)
    said = _manager(system, ns.user, *(("list", LABEL) if system == "Darwin" else ("is-active", UNIT)))
    print(f"unit: {path} ({'installed' if path.exists() else 'not installed'})")
    print(f"service manager: {said.stdout.strip() or said.stderr.strip() if said else 'not available here'}")
    port = installed_port(path) or config.load(home=Path(ns.home).expanduser() if ns.home else None).api_port
    try:
        health = request(f"http://127.0.0.1:{port}/health", timeout=5)
        print(f"node: {health.get('status')} (version {health.get('version')}) on port {port}")
        return 0
    except Exception as exc:  # noqa: BLE001 - any failure to reach it is the answer
        print(f"node: not answering on port {port} ({exc})")
        return 1


def installed_port(path: Path) -> int | None:
    """The `--api-port` the installed unit passes the node, if it passes one."""
    try:
        content = path.read_bytes()
        words = (plistlib.loads(content)["ProgramArguments"] if path.suffix == ".plist"
                 else next((ln for ln in content.decode().splitlines() if ln.startswith("ExecStart=")), "").split())
    except (OSError, ValueError, KeyError, plistlib.InvalidFileException):
        return None
    if "--api-port" in words[:-1]:
        value = words[words.index("--api-port") + 1]
        return int(value) if value.isdigit() else None
    return None


def logs(ns: argparse.Namespace) -> int:
    system = platform.system()
    if system == "Darwin":
        home = Path(ns.home or Path.home() / ".skulk").expanduser()
        return subprocess.call(["tail", "-n", str(ns.lines), str(home / "logs" / "launchd.err.log")])
    return subprocess.call(["journalctl", *(["--user"] if ns.user else []), "-u", UNIT, "-n", str(ns.lines),
                            "--no-pager"])


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    svc = sub.add_parser("service", help="run a node under systemd (Linux) or launchd (macOS)")
    verbs = svc.add_subparsers(dest="service_command", required=True)
    for name, fn, text in (("install", install, "write the unit and start it"),
                           ("uninstall", uninstall, "stop it and remove the unit"),
                           ("status", status, "the service manager's and the node's own status"),
                           ("logs", logs, "the service's recent log")):
        verb = verbs.add_parser(name, help=text)
        verb.add_argument("--home", help="the node's home (default ~/.skulk)")
        verb.add_argument("--user", action="store_true", help="a user unit (Linux; macOS agents always are)")
        verb.add_argument("--root", type=Path, help="write under this directory; touch no service manager")
        if name == "install":
            verb.add_argument("--no-start", action="store_true", help="write the unit only")
            verb.add_argument("args", nargs=argparse.REMAINDER, help="the node's own flags, after --")
        if name == "logs":
            verb.add_argument("--lines", type=int, default=100)
        verb.set_defaults(func=fn)
