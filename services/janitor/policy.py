"""What the janitor deletes (pure): trace files older than the retention period."""

from __future__ import annotations

DAY_S = 86400.0


def expired_traces(files: list[tuple[str, float]], now_wall: float, retention_days: float) -> list[str]:
    """Names of `trace_*.json` files whose mtime is older than `retention_days`.

    `retention_days <= 0` disables clean-up (the runbook's off switch).
    """
    if retention_days <= 0:
        return []
    cutoff = now_wall - retention_days * DAY_S
    return sorted(name for name, mtime in files
                  if name.startswith("trace_") and name.endswith(".json") and mtime < cutoff)
