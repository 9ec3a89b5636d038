"""Restart budget: at most `intensity` restarts in any `period` seconds (pure, monotonic time)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RestartBudget:
    intensity: int
    period_s: float
    stamps: tuple[float, ...] = ()

    def record(self, now: float) -> tuple[RestartBudget, bool]:
        """Count one restart at `now`; True when that exceeds the budget (escalate)."""
        recent = tuple(t for t in self.stamps if now - t < self.period_s) + (now,)
        return RestartBudget(self.intensity, self.period_s, recent), len(recent) > self.intensity
