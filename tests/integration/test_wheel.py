"""A built wheel (not the editable install) installs into a fresh venv and runs a node.

Offline: the wheel is built with the dev venv's setuptools (`--no-build-isolation --no-index`)
from a copy of the working tree (so a stale `build/` in the repo cannot leak into it), and the
fresh venv sees its dependencies through a `.pth` line naming the dev venv's site-packages.
That line does not run the dev venv's own `.pth` files, so the editable skulk there stays out
of the way: every `skulk.*` module must come from the fresh venv.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

from tests.integration.serving import MODEL, http_json
from tests.paths import REPO

NOT_SOURCE = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache")
# The development tools and the test extras they need stay out of the wheel (tools/__init__.py).
DEV_ONLY_IMPORT = re.compile(r"^\s*(?:import|from)\s+(?:tools|schemathesis|hypothesis)\b", re.MULTILINE)

PROBE = """
import importlib, importlib.metadata, json, sys, sysconfig
mods = {}
for name in sys.argv[1:]:
    mods[name] = importlib.import_module(name).__file__
print(json.dumps({"purelib": sysconfig.get_paths()["purelib"], "modules": mods,
                  "dist": str(importlib.metadata.distribution("skulk")._path)}))
"""


def run(argv: list[str | Path], timeout: float, **kw) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kw)
    assert out.returncode == 0, f"{argv} -> {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def build_wheel(tmp: Path) -> Path:
    src, dist = tmp / "src", tmp / "dist"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                          "--no-index", "-w", str(dist), str(src)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, ("wheel build failed (the dev venv needs setuptools>=70.1: "
                                 f"`make setup`)\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    (wheel,) = dist.glob("skulk-*.whl")
    return wheel


def expected_files() -> set[str]:
    """Every file of every mapped package dir, as its path inside the wheel."""
    package_dir = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    files = set()
    for package, folder in package_dir.items():
        for path in (REPO / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files.add("/".join([*package.split("."), *path.relative_to(REPO / folder).parts]))
    return files


def dev_only_parts(wheel: Path) -> list[str]:
    """The wheel's files that are development tools, or that import them or the test extras."""
    tools = {f"skulk/scripts/{p.name}" for p in (REPO / "tools").glob("*.py") if p.name != "__init__.py"}
    found = []
    with zipfile.ZipFile(wheel) as whl:
        for name in whl.namelist():
            if name.split("/")[0] == "tools" or name in tools:
                found.append(f"{name}: a development tool")
            elif name.endswith(".py") and (match := DEV_ONLY_IMPORT.search(whl.read(name).decode())):
                found.append(f"{name}: {match.group(0).strip()}")
    return found


def test_built_wheel_installs_into_fresh_venv_and_serves(tmp_path: Path, nodes, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.delenv("SKULK_HOME", raising=False)
    monkeypatch.chdir(tmp_path)  # not the repo: `python -m`/`-c` put the cwd first on sys.path

    wheel = build_wheel(tmp_path)
    missing = expected_files() - set(zipfile.ZipFile(wheel).namelist())
    assert not missing, f"the wheel lacks {sorted(missing)} (pyproject.toml packages/package-data)"
    dev_only = dev_only_parts(wheel)
    assert not dev_only, f"the wheel ships development tools or test extras: {dev_only}"

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], timeout=60)
    python, skulk = venv / "bin" / "python", venv / "bin" / "skulk"
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
         "--no-cache-dir", wheel], timeout=120)
    site = Path(json.loads(run([python, "-c", PROBE], timeout=30).stdout)["purelib"])
    dev_site = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz_skulk_dev_deps.pth").write_text("".join(f"{p}\n" for p in sorted(dev_site)))

    subpackages = ["skulk.scripts.cli", "skulk.supervisor", "skulk.wire", "skulk.services.api",
                   "skulk.services.api.http", "skulk.services.api.dialects", "skulk.services.runner",
                   "skulk.services.master",
                   "mlx_lm", "zmq", "falcon", "gunicorn"]
    probe = json.loads(run([python, "-c", PROBE, *subpackages], timeout=60).stdout)
    for name, file in probe["modules"].items():
        if name.startswith("skulk."):
            assert Path(file).is_relative_to(site), f"{name} from {file}, not the wheel in {site}"
    assert Path(probe["dist"]).is_relative_to(site), probe["dist"]

    help_out = run([skulk, "--help"], timeout=30)
    assert help_out.stdout.startswith("usage: skulk") and "run" in help_out.stdout

    home = tmp_path / "node"
    run([skulk, "model", "demo", "--kind", "tiny", "--home", home], timeout=120)
    assert (home / "models" / "skulk--demo-tiny" / "model.safetensors").is_file()

    node = nodes(name="node", ready=False, command=(str(skulk),), args=("--place", MODEL))
    waited = subprocess.run([str(skulk), "admin", "wait", "--home", str(home), "--wait", "30"],
                            capture_output=True, text=True, timeout=45)
    assert waited.returncode == 0, f"{waited.stdout}{waited.stderr}\n{node.log_tail()}"
    ready = subprocess.run([str(skulk), "model", "wait", MODEL, "--url", node.url, "--timeout", "60"],
                           capture_output=True, text=True, timeout=75)
    assert ready.returncode == 0, f"{ready.stdout}{ready.stderr}\n{node.log_tail()}"

    status, body = http_json(f"{node.url}/v1/chat/completions", {
        "model": MODEL, "max_tokens": 4, "temperature": 0,
        "messages": [{"role": "user", "content": "Beautiful is better than ugly."}]}, timeout=60)
    assert status == 200, body
    content = body["choices"][0]["message"]["content"]
    assert isinstance(content, str) and content, body
    assert 1 <= body["usage"]["completion_tokens"] <= 4, body
