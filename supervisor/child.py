"""One child OS process: a fresh interpreter started with `python -m <module>`.

Never fork after MLX is imported: every child is a new `sys.executable`. Children stay in
the root's process group (launchd/systemd can clean them up) and exit by themselves when
their parent dies (they check `SKULK_PARENT_PID`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from skulk.supervisor.spec import ChildSpec


class ChildProcess:
    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.returncode: int | None = None

    @classmethod
    def spawn(cls, spec: ChildSpec, *, child_id: str, home: Path, run_dir: Path,
              extra_args: tuple[str, ...] = ()) -> ChildProcess:
        title = spec.title if child_id == spec.id else f"{spec.title} {child_id}"
        argv = [sys.executable, "-m", spec.module,
                "--child-id", child_id, "--title", title,
                "--home", str(home), "--run-dir", str(run_dir),
                "--heartbeat-s", repr(spec.heartbeat_s),
                *spec.args, *extra_args]
        env = dict(os.environ, SKULK_PARENT_PID=str(os.getpid()), PYTHONUNBUFFERED="1")
        return cls(subprocess.Popen(argv, env=env, close_fds=True, stdin=subprocess.DEVNULL))

    def poll(self) -> int | None:
        """Reap without blocking; the return code once the process has exited."""
        if self.returncode is None:
            self.returncode = self._popen.poll()
        return self.returncode

    def terminate(self) -> None:
        """SIGTERM, plus SIGCONT so a frozen (SIGSTOPped) child can act on it."""
        self._signal(signal.SIGTERM)
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass
