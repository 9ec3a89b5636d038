"""The packages keep to their jobs: `wire/` is the protocol (standard library, msgpack, pyzmq, and
the state's types from `cluster/`, whose events are wire messages); `cluster/` and `node/` never
reach into the processes (`services`, `supervisor`), and nothing shipped imports mlx at the top
of `wire/`, `cluster/` or `node/` (the supervisor and most roles never load it). A role never
imports another role or the supervisor: what two processes share lives in `node/`, `cluster/`
or `wire/`, so a role can be read, changed and restarted on its own. The tests import what they
share from builder modules (`tests/unit/builders.py`, `tests/integration/cluster.py`, ...),
never from another test module."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {
    "wire": {"msgpack", "zmq", "skulk.wire", "skulk.cluster"},
    "cluster": {"msgpack", "zmq", "skulk.wire", "skulk.cluster", "skulk.node"},
    "node": {"msgpack", "zmq", "yaml", "psutil", "prometheus_client", "huggingface_hub", "llguidance",
             "skulk.wire", "skulk.cluster", "skulk.node"},
}
ONLY_INSIDE_FUNCTIONS = {"node": {"mlx", "tokenizers", "gguf", "transformers"}}
"""Imported where they are used, never at a module's top: the GGUF import (`node/gguf_import.py`)
needs them, the supervisor and the roles that import `node/` never load them."""


def top_level(path: Path) -> set[str]:
    """The modules a file imports at its top (kept to the first part, as `imported` does)."""
    out = set()
    for node in ast.parse(path.read_text()).body:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
        out.update(n.split(".")[0] for n in names)
    return out


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
        lazy = ONLY_INSIDE_FUNCTIONS.get(package, set())
        extra = {m for m in imported(path) if m not in sys.stdlib_module_names and m != "__future__"} \
            - ALLOWED[package] - (lazy - top_level(path))
        if extra:
            wrong[path.name] = sorted(extra)
    assert wrong == {}, f"{package}/ imports beyond its job: {wrong}"


SHARED_BY_ROLES = {"base", "faults"}
"""`services/*.py`: what every role's process runs on (its runtime and fault injection)."""


def test_a_role_imports_no_other_role_and_not_the_supervisor():
    wrong = {}
    for path in sorted((ROOT / "services").rglob("*.py")):
        rel = path.relative_to(ROOT / "services")
        own = rel.parts[0] if len(rel.parts) > 1 else None  # None: a module shared by the roles
        for module in imported_fully(path):
            parts = module.split(".")
            if parts[:2] == ["skulk", "supervisor"]:
                wrong.setdefault(str(rel), []).append(module)
            elif parts[:2] == ["skulk", "services"] and len(parts) > 2 and parts[2] not in SHARED_BY_ROLES \
                    and parts[2] != own:
                wrong.setdefault(str(rel), []).append(module)
    assert wrong == {}, f"roles reaching into another role or the supervisor: {wrong}"


def imported_fully(path: Path) -> set[str]:
    """Every module a file imports, at any depth, by its full name."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def test_no_test_module_is_imported_by_another_file():
    """A test module is a leaf: what several files share lives in a builders module, so a test
    file can be moved, split or deleted without breaking another file's imports."""
    wrong = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = "." * node.level + (node.module or "")
                modules = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            hits = [m for m in modules if m.lstrip(".").split(".")[-1].startswith("test_")
                    and (m.startswith("tests.") or m.startswith("."))]
            if hits:
                wrong.setdefault(str(path.relative_to(ROOT)), []).extend(hits)
    assert wrong == {}, f"test modules imported by other files (move the shared names to a builders module): {wrong}"
