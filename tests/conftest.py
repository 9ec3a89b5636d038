"""The suite: `unit/` tests pure modules in one process (fast), `integration/` starts real node
processes. Each test file is `test_<feature>.py` and holds the tests of one feature. What several
files share lives in builder modules, never in a test module: `unit/builders.py` (with
`master_sim.py`, `batcher_driver.py`, `diagnostics_builders.py`, `supervisor_fakes.py` for their
subjects) and `integration/`'s `harness.py`, `cluster.py`, `serving.py`, `browser.py`, ...; no
file imports a `test_*` module (`unit/test_layout.py` checks it).

The suite's order: the longest files first, so that parallel workers (`make test` runs
pytest-xdist, one file to a worker at a time) do not end waiting on one long file started last;
and, in a parallel run, one BLAS thread per runner.

`SLOWEST_FIRST` is the files' measured order (`pytest --durations=0`, summed per file); a file not
listed runs after them in the usual order. Keep it roughly right when a file grows: a wrong
order costs time, never a result.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Files running side by side share the machine's cores: one BLAS thread per runner, or
    # OpenBLAS's threads (which spin while they wait for work) crowd out every other process.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # ... and one llama.cpp thread per runner (and per reference): its threads spin at every
    # step's barrier, so two of them beside another file's work burn both cores for one's work.
    os.environ.setdefault("SKULK_RUNNER_THREADS", "1")



def _interrupted(signum: int, _frame: FrameType | None) -> None:
    """A SIGTERM (a CI job's time limit, `timeout`) stops the run as Ctrl-C does, so the fixtures
    are torn down and the nodes the tests started are killed instead of left running."""
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


signal.signal(signal.SIGTERM, _interrupted)

SLOWEST_FIRST = (
    "integration/test_real_model.py",
    "integration/test_key_rotation.py",
    "integration/test_failures_under_load.py",
    "integration/test_chaos.py",
    "integration/test_resume.py",
    "integration/test_failures.py",
    "integration/test_staging.py",
    "integration/test_cluster.py",
    "integration/test_batching.py",
    "integration/test_llama_engine.py",
    "integration/test_dashboard.py",
    "integration/test_chaos_replicas.py",
    "integration/test_long_steps.py",
    "integration/test_supervision.py",
    "integration/test_inference.py",
    "integration/test_auth.py",
    "integration/test_sharding.py",
    "integration/test_control_and_tap.py",
    "integration/test_fuzz_ranks.py",
    "integration/test_diagnostics.py",
    "integration/test_lan_discovery.py",
    "integration/test_node_names.py",
    "integration/test_fuzz_frames.py",
)


def _rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0].removeprefix("tests/")
    return SLOWEST_FIRST.index(path) if path in SLOWEST_FIRST else len(SLOWEST_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: a file's tests keep their order
