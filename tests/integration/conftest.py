from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import Node, start_node
from tests.integration.real_model import REAL_DIR

DEMO_DIR = "skulk--demo-tiny"


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, argv: list[str], timeout: float) -> Path:
    """The home `name` that `skulk model demo <argv> --home HOME` fills, made once for the whole
    run: parallel workers share it (the first builds it under a lock, the others wait and reuse
    it), since each build is seconds of CPU, and the fp32 copy a CPU runner keeps beside a model
    is then also made once (it is written to a temporary name and renamed: readers never see
    half of it)."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the run's, not one worker's
    home, done = root / name, root / f"{name}.built"
    with FileLock(str(root / f"{name}.lock"), timeout=timeout):
        if not done.exists():
            out = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "demo", *argv, "--home",
                                  str(home)], capture_output=True, text=True, timeout=timeout)
            assert out.returncode == 0, out.stderr
            done.touch()
    return home


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo model, built once per run by the real CLI (keeps mlx out of pytest)."""
    return built_once(tmp_path_factory, "demo-home", ["--kind", "tiny"], 300) / "models" / DEMO_DIR


@pytest.fixture(scope="session")
def real_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real demo model (SmolLM2-135M-Instruct from a package's GGUF file), imported once per
    run by the real CLI: its MLX weights and the GGUF file beside them."""
    return built_once(tmp_path_factory, "real-home", [], 600) / "models" / REAL_DIR


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report carries the logs of the nodes it started (`failure_logs`), then of
    the nodes its file shares (`module_nodes`)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call" and report.failed:
        shared = getattr(getattr(item, "module", None), "skulk_module_nodes", [])
        for node in [*getattr(item, "skulk_nodes", ()), *shared][:4]:
            report.sections.append((f"node {node.home.name} logs", node.failure_logs()))


def _node_factory(root: Path, owner: object) -> Iterator[Callable[..., Node]]:
    """`owner` (a test item, or a test module for the nodes a file shares) keeps the list of the
    nodes started, for the failure report."""
    started: list[Node] = []
    setattr(owner, "skulk_nodes" if isinstance(owner, pytest.Item) else "skulk_module_nodes", started)

    def start(name: str = "node", ready: bool = True, **kw: Any) -> Node:
        node = start_node(root, name, ready=False, **kw)
        started.append(node)
        if ready:
            node.wait_ready(timeout=30)  # stretched for this machine (patience.py)
        return node

    try:
        yield start
    finally:
        for node in started:
            node.kill_all()


@pytest.fixture
def nodes(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Node]]:
    """`nodes(name=..., config=..., env=..., args=..., models=...)` starts a real node;
    all are killed at teardown, whatever happened; a failed test's report shows their logs."""
    yield from _node_factory(tmp_path, request.node)


@pytest.fixture(scope="module")
def module_nodes(tmp_path_factory: pytest.TempPathFactory,
                 request: pytest.FixtureRequest) -> Iterator[Callable[..., Node]]:
    """As `nodes`, for nodes a whole test file shares (tests that only read what the node
    serves; a test that breaks a node starts its own): killed after the file's last test."""
    yield from _node_factory(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]), request.module)
