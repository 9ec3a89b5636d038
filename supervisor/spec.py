"""The tree declared as data: child specs and supervisor specs (OTP's child_spec)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from skulk.node.logsetup import LogSettings

Restart = Literal["permanent", "transient", "temporary"]
Strategy = Literal["one_for_one", "rest_for_one", "one_for_all", "simple_one_for_one"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildSpec:
    """One OS process: `python -m <module> <ChildArgs> <args>`, shown as `skulk: <title>`.

    `ready_timeout_s` bounds boot (for runners: load + warmup); after ready the child must
    heartbeat every `heartbeat_s` or be killed after `liveness` missed beats (or, inside one
    step it reported, at `step_deadline_s`).
    """

    id: str
    module: str
    title: str
    args: tuple[str, ...] = ()  # the role's own (`role_args.py`), after the `ChildArgs` every child gets
    log: LogSettings = LogSettings()
    key_file: str = ""  # the cluster key file (resolved), given to the child as `ChildArgs.key_file`
    restart: Restart = "permanent"
    shutdown_s: float = 5.0
    ready_timeout_s: float = 15.0
    heartbeat_s: float = 1.0
    liveness: int = 3
    step_deadline_s: float = 0.0
    """How long one step may keep the child's loop from beating while its watch thread says
    it is inside that step (runners: a first-use compile, a large prefill); 0: no grace."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SupervisorSpec:
    """A supervisor: its children, strategy and restart budget (`intensity` in `period_s`).

    A `simple_one_for_one` supervisor starts empty and builds children from `template`.
    """

    id: str
    strategy: Strategy
    intensity: int
    period_s: float
    children: tuple[ChildSpec | SupervisorSpec, ...] = ()
    template: ChildSpec | None = None
    restart: Restart = "permanent"
    shutdown_s: float = field(default=float("inf"))
