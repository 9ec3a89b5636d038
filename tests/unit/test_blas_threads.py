"""How many OpenBLAS threads a rank of a sharded instance takes when other ranks of its ring
run on the same machine (several nodes on one machine): the pure decision, and the setter on
the real preloaded OpenBLAS where this machine has it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skulk.services.runner.blas import OPENBLAS_PATHS, host_of, threads_beside_ranks

HERE = {"127.0.0.1", "::1", "10.0.0.5"}


def test_ranks_on_one_machine_split_its_cores_evenly() -> None:
    assert threads_beside_ranks(2, ["127.0.0.1:5000", "127.0.0.1:5001"], 0, HERE, 0) == 1
    assert threads_beside_ranks(8, ["10.0.0.5:1", "127.0.0.1:2", "10.0.0.9:3"], 0, HERE, 0) == 4
    assert threads_beside_ranks(16, ["[::1]:1", "::1:2", "[::1]:3", "[::1]:4"], 2, HERE, 0) == 4


def test_ranks_written_as_this_ranks_own_host_are_here_though_no_address_matches() -> None:
    """A node listening on a name (`--listen myhost`) advertises the name, not an address."""
    assert threads_beside_ranks(4, ["myhost:1", "myhost:2", "other:3"], 1, HERE, 0) == 2
    assert threads_beside_ranks(4, ["fe80::1%eth0:1", "fe80::1%eth1:2"], 0, HERE, 0) == 2


def test_more_ranks_than_cores_take_one_thread_each() -> None:
    assert threads_beside_ranks(2, [f"127.0.0.1:{p}" for p in range(3)], 1, HERE, 0) == 1


def test_a_rank_alone_on_its_machine_is_left_to_openblas() -> None:
    assert threads_beside_ranks(2, ["10.0.0.5:1", "10.0.0.9:2"], 0, HERE, 0) is None


def test_the_operators_number_is_kept() -> None:
    assert threads_beside_ranks(2, ["127.0.0.1:1", "127.0.0.1:2"], 0, HERE, 2) is None


def test_hosts_are_read_from_every_address_form() -> None:
    assert [host_of(a) for a in ("10.0.0.5:1", "[::1]:2", "::1:3", "fe80::1%eth0:4", "myhost:5")] == \
        ["10.0.0.5", "::1", "::1", "fe80::1", "myhost"]


@pytest.mark.skipif(not any(Path(p).exists() for p in OPENBLAS_PATHS), reason="no Debian OpenBLAS on this machine")
def test_the_setter_reaches_the_preloaded_openblas() -> None:
    """In a fresh interpreter (the preload must come before mlx): the count OpenBLAS reports
    after setting one more than its default, then one."""
    code = ("import ctypes; from skulk.services.runner import blas; blas.preload_blas(); "
            "lib = ctypes.CDLL(blas._preloaded[0]); n = lib.openblas_get_num_threads(); "
            "assert blas.set_threads(n + 1); more = lib.openblas_get_num_threads(); "
            "assert blas.set_threads(1); print(n, more, lib.openblas_get_num_threads())")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GOTO_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True, env=env)
    default, more, one = map(int, out.stdout.split())
    assert (more, one) == (default + 1, 1), out.stdout
