"""A hard deadline around a call that may block in C forever (it exits with a code from
`node/exitcodes.py`), and the stall watch's step beats to the supervisor."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("skulk.runner")


class Deadline:
    """A faulted Metal eval parks at 0% CPU, uninterruptible from Python; `mx.distributed.init`
    blocks until every rank connects. A timer thread is the only way to bound such calls: on
    overrun it logs a CRITICAL diagnosis, runs `before_exit(message, code)` and exits with `code`."""

    def __init__(self, seconds: float, what: str, guidance: str, code: int,
                 before_exit: Callable[[str, int], None] | None = None) -> None:
        self.seconds, self.what, self.guidance, self.code = seconds, what, guidance, code
        self.before_exit = before_exit
        self._timer = threading.Timer(seconds, self._overrun)
        self._timer.daemon = True

    def _overrun(self) -> None:
        message = f"{self.what} exceeded its {self.seconds:.0f}s deadline — {self.guidance}"
        log.critical(message)
        if self.before_exit is not None:
            try:
                self.before_exit(message, self.code)
            except Exception:  # noqa: BLE001 - the exit below must happen whatever this does
                pass
        logging.shutdown()
        os._exit(self.code)

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


class StepBeats:
    """The stall watch's line to the supervisor (its own PUSH: the loop's is not thread-safe):
    a `Heartbeat` naming the step the loop is inside and its age (`watchdog.ChildClock.in_step`)."""

    def __init__(self, ctx: Any, run_dir: Path, child_id: str) -> None:
        import zmq

        from skulk.wire import endpoints
        from skulk.wire.sockets import make_socket

        self.child_id, self.seq = child_id, 0
        self.sock = make_socket(ctx, zmq.PUSH, hwm=10, connect=endpoints.supervisor_notify(run_dir))

    def send(self, step: str, age_s: float) -> None:
        import zmq

        from skulk.wire.control import Heartbeat
        from skulk.wire.sockets import send

        self.seq += 1
        try:
            send(self.sock, Heartbeat(child_id=self.child_id, pid=os.getpid(), seq=self.seq, step=step,
                                      step_age_s=round(age_s, 3)), flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # the supervisor is not reading: it judges by the beats it gets

    def close(self) -> None:
        self.sock.close(0)
