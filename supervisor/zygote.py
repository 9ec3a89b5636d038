"""`python -m skulk.supervisor.zygote` (or `main` in a fork of the supervisor: `zygote_fork.py`):
one process per node that imports the roles' modules once and forks each new child from that
state, so a child starts in milliseconds instead of paying half a second of CPU to import the
same modules again (nine processes per node).

Linux only, and only an optimisation: the supervisor (`zygote_client.py`) falls back to a fresh
interpreter whenever this process is missing, late or refuses. The rules that keep a forked
child the same as a fresh `python -m <module>`:

- nothing here creates a thread, a zmq context or a logging handler, and MLX is never imported
  (a runner forked from here imports it itself, after the fork); checked after the preload;
- the child's environment is the zygote's own (module-level settings read at import time are
  right); a request with another environment is refused and the supervisor spawns it fresh;
- SIGINT and SIGHUP stay blocked, as the supervisor blocks them for a fresh child; the role
  unblocks them with its handlers in place;
- each child is forked twice, so its parent is the supervisor (a Linux child subreaper) before
  it runs a line of its role: `waitpid`, `SKULK_PARENT_PID` and `PR_SET_PDEATHSIG` all see the
  supervisor, as for a child it spawned itself.

The protocol on the socket the supervisor passes (fd in argv): one JSON line each way.
Request `{"module": ..., "argv": [...], "env": {...}}`; reply `{"pid": N}` or `{"error": ...}`.
"""

from __future__ import annotations

import ast
import gc
import json
import os
import signal
import socket
import struct
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

FORBIDDEN_PRELOADS = ("mlx", "mlx_lm", "torch")
"""Never in the zygote: a process that has imported MLX must not fork (its device state)."""


def role_imports(main_file: Path) -> list[str]:
    """The absolute modules a role's `__main__.py` imports at its top level, in order: what the
    zygote imports so the forked role finds them loaded."""
    out: list[str] = []
    for node in ast.parse(main_file.read_text()).body:
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level and node.module != "__future__":
            out.append(node.module)
    return out


def preload_modules(packages: Iterable[str]) -> list[str]:
    """Every module the children's entry points (`<package>/__main__.py`) import, minus what must
    never be in a forking process."""
    import importlib.util

    seen: dict[str, None] = {}
    for package in packages:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        main = Path(list(spec.submodule_search_locations)[0]) / "__main__.py"
        if main.is_file():
            for module in role_imports(main):
                if module.split(".")[0] not in FORBIDDEN_PRELOADS:
                    seen.setdefault(module, None)
    return list(seen)


def thread_count() -> int:
    """Threads of this process, native ones included (a BLAS pool is invisible to `threading`)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def fork_safe_problems() -> list[str]:
    """Why forking this process now would not give a child a fresh interpreter would (empty: safe)."""
    problems = [f"{name} is imported" for name in FORBIDDEN_PRELOADS if name in sys.modules]
    if (threads := thread_count()) != 1:
        problems.append(f"{threads} threads are running")
    return problems


@dataclass(frozen=True)
class Role:
    """What a forked grandchild runs once it has left the zygote's loop. A standby (`standby`:
    the grandchild's end of its socket to the supervisor) first imports `preimport`, says it is
    ready, and learns its argv only when the supervisor gives it a child to become."""

    module: str
    argv: list[str]
    standby: socket.socket | None = None
    preimport: tuple[str, ...] = ()


def fork_child(role: Role) -> int | Role:
    """Fork twice; the grandchild runs the role once the middle process has been reaped (it is
    then the supervisor's: the subreaper). Returns the grandchild's pid in the zygote, and the
    role in the grandchild, which must unwind out of the zygote's loop to run it."""
    go_r, go_w = os.pipe()
    pid_r, pid_w = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            child = os.fork()
        except OSError:
            os._exit(1)
        if child != 0:
            os.write(pid_w, struct.pack("=i", child))
            os._exit(0)
        for fd in (go_w, pid_r, pid_w):
            os.close(fd)
        go = os.read(go_r, 1)
        os.close(go_r)
        if go != b"g":  # the zygote died before it let us go: nothing waits for us
            os._exit(1)
        return role
    os.close(pid_w)
    os.close(go_r)
    try:
        data = os.read(pid_r, 4)
        os.waitpid(middle, 0)
        if len(data) != 4:
            raise OSError("the forked child did not report its pid")
        os.write(go_w, b"g")
        return int(struct.unpack("=i", data)[0])
    finally:
        os.close(pid_r)
        os.close(go_w)


def run_role(role: Role) -> None:
    """In the grandchild, at the top of its stack: become `python -m module argv...` (exceptions
    and `SystemExit` end the process as they would a fresh interpreter's)."""
    import runpy

    gc.unfreeze()
    argv = role.argv if role.standby is None else wait_as_standby(role)
    sys.argv = [role.module, *argv]
    runpy.run_module(role.module, run_name="__main__", alter_sys=True)


def run_role_and_exit(role: Role) -> NoReturn:
    """`run_role` where there is no interpreter's top level to return to (a zygote forked from
    the supervisor: `zygote_fork.py`), then end as `python -m module` ends: the exit code of its
    `SystemExit` (its message on stderr), 1 and the traceback for an uncaught exception, death by
    SIGINT for an uncaught KeyboardInterrupt; non-daemon threads joined, `atexit` run, streams
    flushed."""
    import atexit

    code: int = 0
    interrupted = False
    try:
        run_role(role)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        interrupted = True
        code = 1
    except BaseException:  # noqa: BLE001 - reported as the interpreter reports it
        sys.excepthook(*sys.exc_info())
        code = 1
    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter's own exit calls
    for step in (shutdown, atexit._run_exitfuncs):
        try:
            if step is not None:
                step()
        except BaseException:  # noqa: BLE001 - each step of the exit is tried, and the exit happens
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:  # noqa: BLE001 - as the interpreter: an exit that cannot flush is 120
            code = code or 120
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


def wait_as_standby(role: Role) -> list[str]:
    """A standby runner: import the engine's stack now (the slow part of a runner's start, paid
    before anyone waits for it), then read the argv of the child to become. This
    process never forks again, so MLX may be imported here. A closed socket ends it."""
    import importlib

    from setproctitle import setproctitle

    assert role.standby is not None
    setproctitle("skulk: standby runner")  # not `skulk: runner <id>` until it is one
    if "skulk.services.runner.prelude" in role.preimport:
        from skulk.services.runner.prelude import prepare

        prepare()  # before mlx and transformers, as the runner's own entry point does
    for module in role.preimport:
        importlib.import_module(module)
    line = role.standby.makefile("rb").readline()  # sent as soon as it was asked for: maybe long ago
    role.standby.close()
    if not line:
        sys.exit(0)
    return [str(a) for a in json.loads(line)["argv"]]


def serve(channel: socket.socket, env: dict[str, str]) -> Role | None:
    """Answer spawn requests until the supervisor closes the channel; in a forked grandchild,
    close the zygote's end and return the role it is to run. A standby's reply carries the
    supervisor's end of its socket (SCM_RIGHTS)."""
    reader = channel.makefile("rb")
    for line in reader:
        ours: socket.socket | None = None
        try:
            request: dict[str, Any] = json.loads(line)
            if request.get("env") != env:
                reply: dict[str, Any] = {"error": "environment differs from the zygote's"}
            elif problems := fork_safe_problems():
                reply = {"error": "; ".join(problems)}
            else:
                theirs = None
                if request.get("standby"):
                    ours, theirs = socket.socketpair()
                role = Role(str(request["module"]), [str(a) for a in request.get("argv", [])], theirs,
                            tuple(str(m) for m in request.get("preimport", [])))
                sys.stdout.flush()
                sys.stderr.flush()
                forked = fork_child(role)
                if isinstance(forked, Role):
                    reader.close()
                    channel.close()
                    if ours is not None:
                        ours.close()
                    return forked
                if theirs is not None:
                    theirs.close()
                reply = {"pid": forked}
        except (ValueError, KeyError, TypeError, OSError) as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        data = json.dumps(reply).encode() + b"\n"
        if ours is not None and "pid" in reply:
            socket.send_fds(channel, [data], [ours.fileno()])
        else:
            channel.sendall(data)
        if ours is not None:
            ours.close()
    return None


def main(args: list[str]) -> Role | None:
    fd, packages = int(args[0]), args[1].split(",")
    channel = socket.socket(fileno=fd)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    import importlib

    from setproctitle import setproctitle

    setproctitle("skulk: zygote")
    from skulk.services.base import die_with_parent

    die_with_parent(signal.SIGKILL)
    failed = []
    for module in preload_modules(packages):
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001  (a child spawned fresh shows the error itself)
            failed.append(f"{module}: {exc}")
    problems = fork_safe_problems()
    gc.collect()
    gc.freeze()  # objects made so far are never touched by the collector: fewer copied pages
    ready = {"ready": not problems, "problems": problems, "failed": failed}
    channel.sendall(json.dumps(ready).encode() + b"\n")
    return None if problems else serve(channel, dict(os.environ))


if __name__ == "__main__":
    forked_role = main(sys.argv[1:])
    if forked_role is not None:
        run_role(forked_role)
