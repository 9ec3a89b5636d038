"""How long a test waits on a real signal before it fails: its nominal deadline, sized on a fast
idle machine, stretched for the machine the suite runs on.

Every wait in the integration tests ends on a real signal (a bus message, a reply, an exit), so a
long deadline costs nothing when the test passes; only a deadline too short for a slow or busy
machine fails a test that is right. `patience(s)` is `s` times `SLACK` (machines of one kind
differ up to about 3x) times the slowdown the suite measures once: how much longer than on the
reference machine a fresh interpreter takes to import the libraries every role imports (a node's
start is mostly process starts and imports; the project's own modules are left out, so making
them faster does not shrink the deadlines). `SKULK_TEST_SLOWDOWN` sets the slowdown instead.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time

SLACK = 3.0
"""Every deadline is this many times what the test needs on the reference machine."""

REFERENCE_IMPORT_S = 0.25
"""What `_measure` takes on the reference machine (2-core x86-64 VM, idle): the wall time to start
an interpreter importing `PROBE` (0.20-0.26 s there)."""

PROBE = ("import zmq, msgpack, psutil, yaml, asyncio, email.message, importlib.metadata, dataclasses, "
         "logging.handlers, json")


@functools.cache
def slowdown() -> float:
    """This machine against the reference, at least 1 (measured once per test process)."""
    given = os.environ.get("SKULK_TEST_SLOWDOWN")
    if given:
        return max(1.0, float(given))
    best = min(_measure() for _ in range(2))
    return max(1.0, min(best / REFERENCE_IMPORT_S, 10.0))


def _measure() -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", PROBE], check=True, timeout=120)
    return time.monotonic() - t0


def patience(seconds: float) -> float:
    """A deadline of nominally `seconds` on this machine."""
    return seconds * SLACK * slowdown()
