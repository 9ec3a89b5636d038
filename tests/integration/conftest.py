from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.integration.harness import Node, start_node


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    """`nodes(name=..., config=..., env=...)` starts a real node; all are killed at teardown."""
    started: list[Node] = []

    def start(name: str = "node", ready: bool = True, **kw: Any) -> Node:
        node = start_node(tmp_path, name, ready=False, **kw)
        started.append(node)
        if ready:
            node.wait_ready(timeout=30)
        return node

    yield start
    for node in started:
        node.kill_all()
