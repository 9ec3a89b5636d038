from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import Node, start_node
from tests.integration.real_model import REAL_DIR

DEMO_DIR = "skulk--demo-tiny"


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo model, built once per session by the real CLI (keeps mlx out of pytest)."""
    home = tmp_path_factory.mktemp("demo-home")
    out = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "demo", "--kind", "tiny", "--home",
                          str(home)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return home / "models" / DEMO_DIR




@pytest.fixture(scope="session")
def real_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real demo model (SmolLM2-135M-Instruct from a package's GGUF file), imported once per
    session by the real CLI: its MLX weights and the GGUF file beside them."""
    home = tmp_path_factory.mktemp("real-home")
    out = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "demo", "--home", str(home)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return home / "models" / REAL_DIR


def _node_factory(root: Path) -> Iterator[Callable[..., Node]]:
    started: list[Node] = []

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
def nodes(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    """`nodes(name=..., config=..., env=..., args=..., models=...)` starts a real node;
    all are killed at teardown, whatever happened."""
    yield from _node_factory(tmp_path)


@pytest.fixture(scope="module")
def module_nodes(tmp_path_factory: pytest.TempPathFactory,
                 request: pytest.FixtureRequest) -> Iterator[Callable[..., Node]]:
    """As `nodes`, for nodes a whole test file shares (tests that only read what the node
    serves; a test that breaks a node starts its own): killed after the file's last test."""
    yield from _node_factory(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]))
