"""The node's zygote (supervisor/zygote.py, zygote_client.py): what it preloads, when it refuses
to fork, and the real thing in a subprocess (`zygote_check.py`)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from skulk.node.config import NodeConfig
from skulk.supervisor import zygote
from skulk.supervisor.loop import child_modules
from skulk.supervisor.tree import ROLES, build_tree


def test_a_roles_imports_are_read_from_its_entry_point(tmp_path):
    main = tmp_path / "__main__.py"
    main.write_text("from __future__ import annotations\nimport os, json\nfrom skulk.services.base import x\n"
                    "from . import y\nif True:\n    import late\n")
    assert zygote.role_imports(main) == ["os", "json", "skulk.services.base"]


def test_every_childs_entry_modules_are_preloaded_and_mlx_never_is(tmp_path):
    packages = child_modules(build_tree(NodeConfig(home=tmp_path), "n1"))
    assert packages == [*(f"skulk.services.{role}" for role in ROLES), "skulk.services.runner"]
    modules = zygote.preload_modules(packages)
    assert "skulk.services.base" in modules
    assert all(f"skulk.services.{role}.service" in modules for role in ("bus", "master", "gossip", "janitor", "runner"))
    assert "gunicorn.arbiter" in modules
    assert not [m for m in modules if m.split(".")[0] in zygote.FORBIDDEN_PRELOADS]


def test_forking_is_refused_while_a_thread_runs():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert any("threads are running" in p for p in zygote.fork_safe_problems())
    finally:
        stop.set()
        thread.join()


@pytest.mark.parametrize("mode", ["fresh", "forked"])
def test_the_zygote_forks_children_that_are_ours_and_gives_way_to_fresh_ones(mode):
    """Started as a fresh interpreter, or forked from the supervisor (`zygote_fork.py`): the
    same children either way."""
    run = subprocess.run([sys.executable, "-m", "tests.unit.zygote_check", mode], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [
        "a_child_with_another_environment_is_left_to_a_fresh_interpreter",
        "a_dead_zygote_is_given_up_on",
        "a_forked_child_exits_as_an_interpreter_would",
        "a_forked_child_is_ours_runs_as_main_with_its_argv_preloaded_and_signals_deferred",
        "a_forked_child_is_reaped_and_signalled_as_a_spawned_one",
        "a_standby_imports_first_becomes_the_child_it_is_given_or_is_let_go",
        "an_orphaned_descendant_is_reaped",
    ]
