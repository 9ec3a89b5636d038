"""One child OS process: a fresh interpreter started with `python -m <module>`, or the same
forked from the node's zygote (`zygote.py`: its modules already imported) where there is one.

Never fork after MLX is imported: the supervisor and the zygote never import it. Children stay in
the root's process group (launchd/systemd can clean them up) and exit by themselves when
their parent dies (they check `SKULK_PARENT_PID`).

A child starts with SIGINT and SIGHUP blocked (`DEFERRED_SIGNALS`): a Ctrl-C or a hangup
to the whole group while it boots stays pending until the role has its own handlers and
unblocks them (`services/base.py` ServiceLoop, the api's arbiter), instead of Python's
KeyboardInterrupt traceback in the middle of its imports. SIGTERM is not deferred: early in
boot it ends the child at once, quietly (-SIGTERM, a normal exit).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Protocol

from skulk.node.child_signals import DEFERRED_SIGNALS
from skulk.node.role_args import ChildArgs
from skulk.supervisor.handle import Signalled
from skulk.supervisor.spec import ChildSpec
from skulk.supervisor.zygote_client import ForkedChild, Standby, Zygote

METRICS_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's multiprocess directory: read when a child first imports the library."""


def metrics_dir(run_dir: Path) -> Path:
    """Where every child writes its Prometheus metrics (`node/metrics.py`); wiped at node start."""
    return run_dir / "metrics"


def child_env(run_dir: Path) -> dict[str, str]:
    """Every child's environment: ours, plus how to reach us and where metrics go."""
    return dict(os.environ, SKULK_PARENT_PID=str(os.getpid()), PYTHONUNBUFFERED="1",
                **{METRICS_ENV: str(metrics_dir(run_dir))})


class DeferredSignals:
    """SIGINT and SIGHUP blocked while a child is made, so it starts with them blocked (the
    mask is inherited across fork and exec); ours is restored at once (a signal that comes
    meanwhile stays pending for us, it is not lost)."""

    def __enter__(self) -> None:
        self._old = signal.pthread_sigmask(signal.SIG_BLOCK, DEFERRED_SIGNALS)

    def __exit__(self, *_exc: object) -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, self._old)


def child_argv(spec: ChildSpec, child_id: str, home: Path, run_dir: Path,
               extra_args: tuple[str, ...] = ()) -> list[str]:
    """The command line of one child: what every child gets (`ChildArgs`), then its role's."""
    title = spec.title if child_id == spec.id else f"{spec.title} {child_id}"
    shared = ChildArgs(child_id=child_id, title=title, home=home, run_dir=run_dir,
                       heartbeat_s=spec.heartbeat_s, log=spec.log, key_file=spec.key_file)
    return [sys.executable, "-m", spec.module, *shared.to_argv(), *spec.args, *extra_args]


class Process(Protocol):
    """What the tree needs of a child, spawned (`ChildProcess`) or forked (`ForkedChild`)."""

    pid: int
    returncode: int | None
    forked: bool
    standby: bool

    def poll(self) -> int | None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


class ChildProcess(Signalled):
    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.returncode: int | None = None
        self.forked = False
        self.standby = False

    @classmethod
    def spawn(cls, spec: ChildSpec, *, child_id: str, home: Path, run_dir: Path,
              extra_args: tuple[str, ...] = (), zygote: Zygote | None = None,
              standby: Standby | None = None) -> ChildProcess | ForkedChild:
        """`standby`: a process made to become this child (importing its engine), tried first."""
        argv = child_argv(spec, child_id, home, run_dir, extra_args)
        env = child_env(run_dir)
        if standby is not None and (ready := standby.assign(argv[3:], env)) is not None:
            return ready
        with DeferredSignals():
            if zygote is not None and (forked := zygote.spawn(spec.module, argv[3:], env)) is not None:
                return forked
            popen = subprocess.Popen(argv, env=env, close_fds=True, stdin=subprocess.DEVNULL)
        return cls(popen)

    def poll(self) -> int | None:
        """Reap without blocking; the return code once the process has exited."""
        if self.returncode is None:
            self.returncode = self._popen.poll()
        return self.returncode
