"""A real node started by a benchmark: its own home and free loopback ports, in its own process
group (killed whole), started as a user starts one (`skulk run`, no name unless asked)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
from pathlib import Path
from typing import Any

from skulk.scripts.http_client import request
from tools.ports import free_port


class BenchNode:
    def __init__(self, root: Path, name: str, model_dir: Path | None = None) -> None:
        self.home = root / name
        (self.home / "models").mkdir(parents=True)
        if model_dir is not None:
            (self.home / "models" / model_dir.name).symlink_to(model_dir)
        self.api, self.cluster = free_port(), free_port(pair=True)
        self.url = f"http://127.0.0.1:{self.api}"
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self, namespace: str, peer: BenchNode | None, named: bool = False,
               extra: tuple[str, ...] = ()) -> None:
        """Start the node and return at once (`start` waits until every role is ready)."""
        args = [sys.executable, "-m", "skulk.scripts.cli", "run", "--home", str(self.home),
                "--api-port", str(self.api), "--cluster-port", str(self.cluster),
                "--listen", "127.0.0.1", "--namespace", namespace,
                *(("--node-name", self.home.name) if named else ()), *extra]
        if peer is not None:
            args += ["--bootstrap-peers", f"127.0.0.1:{peer.cluster}"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)

    def start(self, namespace: str, peer: BenchNode | None, extra: tuple[str, ...] = ()) -> None:
        self.launch(namespace, peer, extra=extra)
        self.wait_booted(60)

    def wait_booted(self, wait_s: float) -> None:
        """Until every role of the node is running (its supervisor's `wait` verb)."""
        subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "admin", "wait", "--home",
                        str(self.home), "--wait", f"{wait_s:g}"], check=True, stdout=subprocess.DEVNULL)

    def state(self) -> dict[str, Any] | None:
        try:
            return request(f"{self.url}/state", timeout=5)
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def kill(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                self.kill()
