"""Runs the retention policy over `<home>/traces`: first pass 60 s after start, then hourly."""

from __future__ import annotations

import argparse
import logging
import time

from skulk.services.base import ServiceLoop
from skulk.services.janitor.policy import expired_traces

log = logging.getLogger("skulk.janitor")

FIRST_RUN_S = 60.0
INTERVAL_S = 3600.0


def setup(loop: ServiceLoop, argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="skulk.services.janitor")
    p.add_argument("--trace-retention-days", type=float, default=3.0)
    ns = p.parse_args(argv)
    traces = loop.rt.args.home / "traces"

    def sweep() -> None:
        try:
            files = [(f.name, f.stat().st_mtime) for f in traces.iterdir() if f.is_file()]
        except OSError:
            return
        doomed = expired_traces(files, time.time(), ns.trace_retention_days)
        for name in doomed:
            try:
                (traces / name).unlink()
            except OSError as exc:
                log.warning("janitor: cannot delete %s: %s", name, exc)
        if doomed:
            log.info("janitor: deleted %d expired trace(s)", len(doomed))
        loop.status_detail = f"last sweep deleted {len(doomed)}"

    loop.every(INTERVAL_S, sweep, first_in=FIRST_RUN_S)
    loop.status_detail = f"retention {ns.trace_retention_days} days"
