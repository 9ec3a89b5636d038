"""The signals a supervisor and its children agree on (both sides import them from here).

A node is stopped by SIGTERM, SIGINT or SIGHUP (`STOP_SIGNALS`), often sent to its whole
process group at once (systemd's `KillMode=control-group`, Ctrl-C in a terminal, a closed
terminal); a child stops on each. A new child starts with SIGINT and SIGHUP blocked
(`DEFERRED_SIGNALS`) until its role has installed its handlers and unblocks them, so a Ctrl-C
during its imports stays pending instead of a KeyboardInterrupt traceback mid-boot.
"""

from __future__ import annotations

import signal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""The signals that stop (or, SIGHUP at the root, restart) a node; children stop on each."""

DEFERRED_SIGNALS = frozenset({signal.SIGINT, signal.SIGHUP})
"""Blocked in a new child until it unblocks them with its handlers in place."""
