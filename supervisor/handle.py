"""What the tree does to one child process by its pid, spawned or forked alike: ask it to stop
(SIGTERM, with SIGCONT so a frozen child can act on it) or kill it, only while it lives."""

from __future__ import annotations

import os
import signal


class Signalled:
    """Signals for a child; subclasses say how it is reaped (`poll`)."""

    pid: int

    def poll(self) -> int | None:
        raise NotImplementedError

    def terminate(self) -> None:
        """SIGTERM, plus SIGCONT so a frozen (SIGSTOPped) child can act on it."""
        self._signal(signal.SIGTERM)
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass
