"""The request a log line belongs to: ids bound for the current thread or task (contextvars).

The API binds a request's command id and task id where it handles the request, and the runner
where it handles the request's messages; the JSON log formatter (`logsetup`) adds whatever is
bound to every line, so a shipper can follow one request across processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_IDS: ContextVar[dict[str, str]] = ContextVar("skulk_log_ids", default={})  # noqa: B039 - never mutated


def current() -> dict[str, str]:
    """The ids bound here (`task_id`, `command_id`), empty outside any `bind`."""
    return _IDS.get()


@contextmanager
def bind(**ids: str) -> Iterator[None]:
    """Add these ids (empty ones skipped) to every log line inside the block."""
    token = _IDS.set({**_IDS.get(), **{k: v for k, v in ids.items() if v}})
    try:
        yield
    finally:
        _IDS.reset(token)
