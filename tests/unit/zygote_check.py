"""The zygote and its client for real (run in a subprocess by `test_zygote.py`: becoming a child
subreaper and forking must not touch the pytest process), started as a fresh interpreter
(`fresh`) or forked from this process as the supervisor forks it (`forked`, argv[1]). Prints the
names of the checks that passed, as JSON; any failure is an exception and a non-zero exit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from skulk.supervisor import zygote_fork
from skulk.supervisor.child import DeferredSignals
from skulk.supervisor.loop import reap_orphans
from skulk.supervisor.tree import ROLES
from skulk.supervisor.zygote_client import ForkedChild, ForkedZygoteProcess, Zygote

passed: list[str] = []


def wait_exit(child: ForkedChild, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while (code := child.poll()) is None:
        assert time.monotonic() < deadline, "forked child did not exit"
        time.sleep(0.02)
    return code


def zombies() -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] == "Z" and int(fields[1]) == os.getpid():
                out.append(int(entry.name))
    return out


def main(mode: str) -> None:
    env = dict(os.environ, SKULK_PARENT_PID=str(os.getpid()), PYTHONUNBUFFERED="1")
    # every child the node may start, the runner too: its modules import no MLX until it loads
    packages = [f"skulk.services.{role}" for role in (*ROLES, "runner")]
    inherited = zygote_fork.open_fds() - {0, 1, 2}  # as `run_node`: whoever started us may leave some open
    lock, _ = tempfile.mkstemp()  # as the node's lock: the forked zygote closes it
    with DeferredSignals():
        zygote = Zygote.start(packages, env) if mode == "fresh" else zygote_fork.fork(packages, env, [lock, *inherited])
    assert zygote is not None, "no zygote on Linux"
    assert isinstance(zygote.proc, ForkedZygoteProcess) == (mode == "forked")
    assert zygote.wait_ready(time.monotonic() + 120), zygote.broken
    tmp = Path(tempfile.mkdtemp())

    child = zygote.spawn("tests.unit.zygote_child", [str(tmp / "seen.json"), "--flag"], env)
    assert child is not None and child.forked
    assert wait_exit(child) == 3
    seen = json.loads((tmp / "seen.json").read_text())
    assert seen == {"ppid": os.getpid(), "parent_env": os.getpid(), "argv": [str(tmp / "seen.json"), "--flag"],
                    "main": "__main__", "preloaded": True, "mlx": False, "fds": [],
                    "deferred_blocked": sorted([int(signal.SIGINT), int(signal.SIGHUP)])}, seen
    passed.append("a_forked_child_is_ours_runs_as_main_with_its_argv_preloaded_and_signals_deferred")

    for flag, code in (("--raise", 1), ("--return", 0)):  # as a fresh interpreter's exit
        child = zygote.spawn("tests.unit.zygote_child", [str(tmp / f"{flag}.json"), flag], env)
        assert child is not None and wait_exit(child) == code, flag
    passed.append("a_forked_child_exits_as_an_interpreter_would")

    child = zygote.spawn("tests.unit.zygote_child", [str(tmp / "killed.json")], env)
    assert child is not None
    deadline = time.monotonic() + 60
    while not (tmp / "killed.json").exists() and child.poll() is None:
        assert time.monotonic() < deadline, "forked child never ran"
        time.sleep(0.01)
    child.kill()
    assert wait_exit(child) in (3, -signal.SIGKILL)
    passed.append("a_forked_child_is_reaped_and_signalled_as_a_spawned_one")

    assert zygote.spawn("tests.unit.zygote_child", [str(tmp / "other.json")], dict(env, OTHER="1")) is None
    assert not zygote.broken and not (tmp / "other.json").exists()
    passed.append("a_child_with_another_environment_is_left_to_a_fresh_interpreter")

    standby = zygote.standby("tests.unit.zygote_child", ("mlx.core",), env)
    assert standby is not None and standby.proc.standby
    became = standby.assign([str(tmp / "standby.json")], env)  # at once: it reads once imported
    assert became is standby.proc
    assert wait_exit(became) == 3
    seen = json.loads((tmp / "standby.json").read_text())
    assert seen["mlx"] and seen["ppid"] == os.getpid() and seen["main"] == "__main__", seen
    letgo = zygote.standby("tests.unit.zygote_child", (), env)
    assert letgo is not None
    letgo.close()
    assert wait_exit(letgo.proc) in (0, -signal.SIGKILL)
    after = zygote.spawn("tests.unit.zygote_child", [str(tmp / "after.json")], env)  # still serving
    assert after is not None and wait_exit(after) == 3  # reaped here: not a zombie for the orphan check below
    passed.append("a_standby_imports_first_becomes_the_child_it_is_given_or_is_let_go")

    orphan_parent = subprocess.Popen(["sh", "-c", "sleep 0.1 & exit 0"])
    orphan_parent.wait()
    deadline = time.monotonic() + 30
    while not zombies():
        assert time.monotonic() < deadline, "the orphan never came to us"
        time.sleep(0.02)
    reap_orphans({zygote.proc.pid})
    assert zombies() == []
    passed.append("an_orphaned_descendant_is_reaped")

    zygote.proc.kill()
    assert zygote.spawn("tests.unit.zygote_child", [str(tmp / "late.json")], env) is None
    assert zygote.broken
    assert zygote.spawn("tests.unit.zygote_child", [str(tmp / "late.json")], env) is None
    passed.append("a_dead_zygote_is_given_up_on")

    json.dump(sorted(passed), sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
