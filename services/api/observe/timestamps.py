"""Epoch seconds as the UTC ISO 8601 text of the API's JSON documents.

Two shapes, each kept byte for byte as its documents (upstream's) have it, so two names:
`iso_micros` always writes microseconds (the diagnostics: fixed width, so equal instants print
equally), `iso_auto` writes them only when not zero (`/state`, the trace list: Python's default
`timespec="auto"`). Here rather than in `node/`: only the API's views render timestamps this way.
A time no clock gives (a bad report on the bus) renders as the nearest representable instant,
never a 500.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

TimeSpec = Literal["auto", "microseconds"]


def _iso(ts: float, timespec: TimeSpec) -> str:
    try:
        return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec=timespec)
    except (OverflowError, ValueError, OSError):
        edge = dt.datetime.max if ts > 0 else dt.datetime.min
        return edge.replace(tzinfo=dt.UTC).isoformat(timespec=timespec)


def iso_micros(ts: float) -> str:
    """`2024-05-01T12:00:00.000000+00:00`: always six fractional digits."""
    return _iso(ts, "microseconds")


def iso_auto(ts: float) -> str:
    """`2024-05-01T12:00:00+00:00`, or `...12:00:00.250000+00:00` when the instant has a fraction."""
    return _iso(ts, "auto")
