"""The packages keep to their jobs: `wire/` is the protocol (standard library, msgpack, pyzmq, and
the state's types from `cluster/`, whose events are wire messages); `cluster/` and `node/` never
reach into the processes (`services`, `supervisor`), and nothing shipped imports mlx at the top
of `wire/`, `cluster/` or `node/` (the supervisor and most roles never load it)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {
    "wire": {"msgpack", "zmq", "skulk.wire", "skulk.cluster"},
    "cluster": {"msgpack", "zmq", "skulk.wire", "skulk.cluster", "skulk.node"},
    "node": {"msgpack", "zmq", "yaml", "psutil", "prometheus_client", "skulk.wire", "skulk.cluster", "skulk.node"},
}


def imported(path: Path) -> set[str]:
    """Every module a file imports, at any depth (`skulk.x.y` kept to its package `skulk.x`)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
        for name in names:
            parts = name.split(".")
            out.add(".".join(parts[:2]) if parts[0] == "skulk" else parts[0])
    return out


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_what_its_job_needs(package):
    wrong = {}
    for path in sorted((ROOT / package).glob("*.py")):
        extra = {m for m in imported(path) if m not in sys.stdlib_module_names and m != "__future__"} \
            - ALLOWED[package]
        if extra:
            wrong[path.name] = sorted(extra)
    assert wrong == {}, f"{package}/ imports beyond its job: {wrong}"
