"""What the janitor deletes (pure): traced tasks older than the retention period.

A traced task is a directory `<home>/traces/<task_id>/` holding one part file per process that
recorded spans there (`node/trace_files.py`); parts of one task are written at about the same
time, but a late one (a rank that finished last) must keep the whole task, so a task's age is
that of its newest file.
"""

from __future__ import annotations

DAY_S = 86400.0


def expired_tasks(tasks: list[tuple[str, float]], now_wall: float, retention_days: float) -> list[str]:
    """Names of the task directories, given as (name, newest file's mtime), whose newest file
    is older than `retention_days`, sorted.

    `retention_days <= 0` disables clean-up (the operator's off switch: traces are kept forever).
    """
    if retention_days <= 0:
        return []
    cutoff = now_wall - retention_days * DAY_S
    return sorted(name for name, newest in tasks if newest < cutoff)
