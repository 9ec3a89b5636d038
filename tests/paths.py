"""The repository root, and running its development tools (`python -m tools.X`) from there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_tool(module: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """`python -m tools.<module> ARGS` with the repo root as the working directory: `tools` is not
    installed (it is not in the wheel), so `-m` finds it through the cwd on sys.path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", f"tools.{module}", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
