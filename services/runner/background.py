"""One piece of a runner's load in a thread beside another (pure Python beside C that leaves the
interpreter free: the tokenizer, 0.8 s on a 2-core CPU, beside the weights' load)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Background:
    """`fn()` in a thread, its result (or its exception) taken once it is needed."""

    def __init__(self, fn: Callable[[], Any], name: str = "runner-load") -> None:
        self._fn = fn
        self._out: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._out = self._fn()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._out
