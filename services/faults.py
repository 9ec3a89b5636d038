"""Fault injection for tests only: make a role crash, abort, hang or slow down at a named phase.

`SKULK_FAULTS="<role>@<phase>=<action>[,...]"`, for example `janitor@boot=hang` or
`gossip@loop=crash`. Actions: `crash` (uncaught exception), `abort` (SIGABRT),
`exit:N`, `hang` (block forever without heartbeats), `slow:S` (block S seconds once, idle),
`busy:S` (compute for S seconds once: a slow or saturated machine, as the watchdog sees it),
`pace:S` (block S seconds each time, logged once: a slower device, step after step).
Phases used today: `boot` (before ready), `ready` (right after ready), `loop` (first loop
tick); a runner's `load`, `warmup`, `prefill`, `decode:<n>` (its step n), `step` (every
step) and `failed` (its failure at boot reported, before it exits). Unset in production:
every check is then a dictionary miss.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

log = logging.getLogger("skulk.faults")


def parse(spec: str) -> dict[tuple[str, str], str]:
    faults: dict[tuple[str, str], str] = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        target, _, action = item.partition("=")
        role, _, phase = target.partition("@")
        if not role or not phase or not action:
            raise ValueError(f"bad SKULK_FAULTS entry {item!r}; expected role@phase=action")
        faults[(role, phase)] = action
    return faults


_FAULTS = parse(os.environ.get("SKULK_FAULTS", ""))
ENABLED = bool(_FAULTS)
"""False in production: hot paths skip building the phase name at all."""
_PACED: set[tuple[str, str]] = set()  # `pace` faults already logged


def inject(role: str, phase: str) -> None:
    """Carry out the fault configured for (role, phase), if any."""
    action = _FAULTS.get((role, phase))
    if action is None:
        return
    if action.startswith("pace:"):
        if (role, phase) not in _PACED:
            _PACED.add((role, phase))
            log.warning("FAULT INJECTION: %s at every %s -> %s", role, phase, action)
        threading.Event().wait(float(action.split(":", 1)[1]))
        return
    log.warning("FAULT INJECTION: %s at %s -> %s", role, phase, action)
    if action == "crash":
        raise RuntimeError(f"injected crash in {role} at {phase}")
    if action == "abort":
        os.kill(os.getpid(), signal.SIGABRT)
    if action.startswith("exit:"):
        os._exit(int(action.split(":", 1)[1]))
    if action == "hang":
        threading.Event().wait()
    if action.startswith("slow:"):
        threading.Event().wait(float(action.split(":", 1)[1]))
    if action.startswith("busy:"):
        until = time.monotonic() + float(action.split(":", 1)[1])
        while time.monotonic() < until:
            sum(range(10000))
