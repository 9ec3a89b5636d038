"""What a child's exit means to its supervisor (pure): part of a stop, or a failure.

A node is often stopped by a signal to its whole process group at once: systemd's default
`KillMode=control-group` (SIGTERM to every process of the unit), Ctrl-C in a terminal (SIGINT
to the foreground group), a closed terminal (SIGHUP). Every child then exits by itself, usually
before the supervisor asks it to. Such an exit is part of the stop, not a failure: reporting it
as "exited unexpectedly", restarting it or charging the restart budget would turn a normal stop
into noise (or an escalation). The decision uses typed values only: the slot's state, the
return code, and whether the tree is stopping.
"""

from __future__ import annotations

from enum import Enum

from skulk.node import exitcodes
from skulk.node.child_signals import STOP_SIGNALS


class ExitKind(Enum):
    STOPPED = "stopped"
    """Asked to stop by its supervisor, or ended by the stop signal while the tree stops."""
    EXITED = "exited"
    """Ended on its own: reported (WARNING, `exited` event) and restarted by its strategy."""



STOP_EXITS = frozenset({exitcodes.CLEAN, *(-s for s in STOP_SIGNALS)})
"""How a child ends when it gets a stop signal: a clean exit from its loop, or the signal's own
default action when it came before the child installed its handlers (early in boot)."""


def classify_exit(prev_state: str, returncode: int, stopping: bool) -> ExitKind:
    """`prev_state` is the slot's state before the exit (`stopping` = this supervisor sent the
    SIGTERM); `stopping` is whether this supervisor or one above it is stopping its children.

    A crash or a SIGKILL during a stop is still EXITED: it is reported, though not restarted.
    """
    if prev_state == "stopping":
        return ExitKind.STOPPED
    if stopping and returncode in STOP_EXITS:
        return ExitKind.STOPPED
    return ExitKind.EXITED
