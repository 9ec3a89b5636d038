"""The development tools (tools/: chaos soak, fuzzers, benchmarks) run as `python -m tools.X` from
the repo root, and the product (every package the wheel ships) never imports them or the test
extras they need (schemathesis, hypothesis). The built wheel is checked too:
tests/integration/test_wheel.py."""

from __future__ import annotations

import re
import tomllib

import pytest

from tests.paths import REPO, run_tool

ENTRY_POINTS = sorted(p.stem for p in (REPO / "tools").glob("*.py") if '__name__ == "__main__"' in p.read_text())
DEV_ONLY_IMPORT = re.compile(r"^\s*(?:import|from)\s+(?:tools|schemathesis|hypothesis)\b", re.MULTILINE)


def pyproject_setuptools() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_the_chaos_fuzz_and_benchmark_engines_are_tools():
    assert {"chaos", "fuzz", "bench_throughput", "bench_formation", "bench_node_kill"} <= set(ENTRY_POINTS)


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_each_tool_runs_with_python_m_from_the_repo_root(module):
    out = run_tool(module, "--help")
    assert out.returncode == 0, f"python -m tools.{module} --help -> {out.returncode}\n{out.stderr[-2000:]}"
    assert out.stdout.startswith("usage:"), out.stdout[:500]


def test_tools_is_not_a_package_of_the_wheel():
    setuptools = pyproject_setuptools()
    assert not [p for p in setuptools["packages"] if p == "tools" or p.startswith("tools.")]
    assert "tools" not in setuptools["package-dir"].values()


def test_no_shipped_module_imports_the_tools_or_the_test_extras():
    offenders = []
    for folder in pyproject_setuptools()["package-dir"].values():
        for path in sorted((REPO / folder).rglob("*.py")):
            if match := DEV_ONLY_IMPORT.search(path.read_text()):
                offenders.append(f"{path.relative_to(REPO)}: {match.group(0).strip()}")
    assert not offenders, offenders
