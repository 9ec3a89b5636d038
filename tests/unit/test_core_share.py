"""Runners stepping at once on one machine share its cores (`services/runner/core_share.py`):
the share itself, and the locks that tell runners of each other, with real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from skulk.services.runner.core_share import CHECK_S, CoreShare, share


def test_the_share_is_even_the_remainder_goes_first_and_a_cap_holds():
    assert [share(2, 1, 0)] == [2]
    assert [share(2, 2, p) for p in range(2)] == [1, 1]
    assert [share(16, 3, p) for p in range(3)] == [6, 5, 5]
    assert [share(2, 5, p) for p in range(5)] == [1] * 5  # never none
    assert share(16, 1, 0, cap=4) == 4 and share(16, 8, 7, cap=4) == 2
    assert share(0, 0, 0) == 1


def test_a_runner_steps_on_every_core_alone_and_on_its_share_while_another_steps(tmp_path):
    a, b = CoreShare(8, directory=tmp_path), CoreShare(8, directory=tmp_path)
    assert a.busy(0.0) == 8  # alone
    assert b.busy(0.0) == 4  # it looks at once when it starts stepping
    assert a.busy(0.1) == 8 and a.busy(CHECK_S) == 4  # the others look every CHECK_S
    b.idle()
    assert a.busy(2 * CHECK_S) == 8  # its share comes back
    assert b.busy(2 * CHECK_S) == 4
    b.close()
    assert a.busy(3 * CHECK_S) == 8 and [p.name for p in tmp_path.iterdir()] == [a.name]


def test_the_engine_is_told_its_threads_only_when_its_share_changes(tmp_path):
    a, b = CoreShare(8, directory=tmp_path), CoreShare(8, directory=tmp_path)
    told: list[int] = []
    threads = a.step_with(0.0, 8, told.append)
    assert threads == 8 and told == []  # alone, as it was made
    b.busy(0.0)
    threads = a.step_with(CHECK_S, threads, told.append)
    assert threads == 4 and told == [4]
    assert a.step_with(CHECK_S, threads, told.append) == 4 and told == [4]  # unchanged: not told again
    b.close()
    assert a.step_with(2 * CHECK_S, threads, told.append) == 8 and told == [4, 8]


def test_a_killed_runner_gives_its_share_back_and_its_file_goes(tmp_path):
    """Another process holds its lock as a busy runner does; SIGKILL frees it at once."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys\n"
        "from pathlib import Path\n"
        "from skulk.services.runner.core_share import CoreShare\n"
        f"s = CoreShare(2, directory=Path({str(tmp_path)!r}))\n"
        "s.busy(0.0)\n"
        "print('busy', flush=True)\n"
        "sys.stdin.read()\n")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # busy until killed
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "busy"
        mine = CoreShare(2, directory=tmp_path)
        assert mine.busy(0.0) == 1 and mine.busy_runners == 2
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        assert mine.busy(CHECK_S) == 2 and mine.busy_runners == 1
        assert [p.name for p in tmp_path.iterdir()] == [mine.name]  # the dead runner's file removed
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_no_directory_means_no_sharing_not_a_failure(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    lone = CoreShare(4, cap=3, directory=blocked / "share")
    assert lone.busy(0.0) == 3 and not lone.enabled
    lone.idle()
    lone.close()


def test_a_runner_under_a_cap_still_counts_for_the_others(tmp_path):
    capped, full = CoreShare(4, cap=1, directory=tmp_path), CoreShare(4, directory=tmp_path)
    assert capped.busy(0.0) == 1
    assert full.busy(0.0) == 2  # an even share: the capped runner's unused core is not counted back
    assert os.path.exists(Path(tmp_path) / capped.name)
