"""What a fuzzed node must still be afterwards: every role running with the pid and restart
count it had, memory bounded, logs not grown per frame, and a normal chat completion served.

`NodeProbe.snapshot()` reads the supervisor's status, the RSS of every process of the node's
process group and the size of each log file; `problems(before, after)` compares two of them.
The bounds are generous on purpose: they catch a queue that grows with every frame (gigabytes,
a line per frame), not the few hundred megabytes a runner's caches take as it serves.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import zmq

from skulk.scripts.admin_client import request
from skulk.wire import endpoints
from skulk.wire.control import AdminCommand, AdminVerb
from skulk.wire.sockets import make_socket
from skulk.wire.topics import EVT_RUNNER

RSS_FACTOR, RSS_SLACK = 2.0, 256 << 20
"""A process may end at most at twice its RSS plus 256 MiB."""
LOG_LINES_MAX = 150
"""Lines a role may add to its log during a run: refusals are logged once per peer, then
summarised (wire/refusals.py), so a flood of bad frames adds a few dozen. The API and the
runners log a line per request they serve or refuse, by design: their logs are not counted."""
LOG_LINES_PER_MINUTE = 25
"""And per minute of a run: a fuzzer that keeps opening fresh connections gets at most 20 first
lines a minute per refusing place, plus its summary line."""
PER_REQUEST_LOGS = ("api", "runner-")
MODEL = "skulk/demo-tiny"


@dataclass(frozen=True)
class Snapshot:
    roles: dict[str, tuple[int | None, str, int]]  # child id -> (pid, state, restarts)
    rss: dict[int, tuple[str, int]]  # pid -> (process title, bytes)
    log_lines: dict[str, int]  # log file name -> lines


class NodeProbe:
    def __init__(self, home: Path, url: str, root_pid: int) -> None:
        self.home, self.url, self.root_pid = home, url.rstrip("/"), root_pid

    def group(self) -> list[psutil.Process]:
        procs = []
        for p in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(p.pid) == self.root_pid and p.status() != psutil.STATUS_ZOMBIE:
                    procs.append(p)
            except (ProcessLookupError, psutil.Error):
                continue
        return procs

    def snapshot(self) -> Snapshot:
        status = request(self.home, AdminCommand(verb=AdminVerb.STATUS), timeout_s=10.0)
        roles = {c.id: (c.pid, c.state, c.restarts) for c in status.children}
        rss: dict[int, tuple[str, int]] = {}
        for p in self.group():
            try:
                rss[p.pid] = (" ".join(p.cmdline())[:60], p.memory_info().rss)
            except psutil.Error:
                continue
        logs = {f.name: _lines(f) for f in sorted((self.home / "logs").glob("*.log"))}
        return Snapshot(roles, rss, logs)

    def serves(self, timeout: float = 120.0) -> str:
        """"" once a chat completion of the demo model answers 200 with tokens; else why not.
        A busy runner (503: still finishing what a fuzzer left) is retried on each runner report."""
        body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "still there?"}]}
        end = time.monotonic() + timeout
        last = ""
        while time.monotonic() < end:
            try:
                status, doc = _post(f"{self.url}/v1/chat/completions", body, timeout=60)
            except (OSError, ValueError) as exc:  # refused, reset, timed out, not JSON: the node is not serving
                return f"{type(exc).__name__}: {exc}"
            if status == 200 and doc["usage"]["completion_tokens"] > 0:
                return ""
            last = f"{status}: {json.dumps(doc)[:300]}"
            if status != 503:
                return last
            self._next_report(end - time.monotonic())
        return f"no completion within {timeout:.0f}s: {last}"

    def _next_report(self, left: float) -> None:
        """Block until the node's runners publish their next report (every 2 s) or `left` passes."""
        run = endpoints.run_dir(self.home.resolve())
        sub = make_socket(zmq.Context.instance(), zmq.SUB, connect=endpoints.bus_capture(run),
                          subscribe=(EVT_RUNNER.prefix,))
        try:
            sub.poll(int(max(0.0, left) * 1000) + 1)
        finally:
            sub.close(0)


def problems(before: Snapshot, after: Snapshot, seconds: float = 0.0) -> list[str]:
    """Everything that broke the pass rule between two snapshots `seconds` of fuzzing apart."""
    log_max = LOG_LINES_MAX + LOG_LINES_PER_MINUTE * seconds / 60
    out = []
    for child, (pid, _state, restarts) in before.roles.items():
        now = after.roles.get(child)
        if now is None:
            out.append(f"{child}: gone")
        elif now[1] != "running" or now[0] != pid or now[2] != restarts:
            out.append(f"{child}: pid {pid} -> {now[0]}, {now[1]}, restarts {restarts} -> {now[2]}")
    for pid, (title, rss) in before.rss.items():
        if pid in after.rss and after.rss[pid][1] > RSS_FACTOR * rss + RSS_SLACK:
            out.append(f"{title} (pid {pid}): RSS {rss >> 20} MiB -> {after.rss[pid][1] >> 20} MiB")
    for name, lines in after.log_lines.items():
        if not name.startswith(PER_REQUEST_LOGS) and lines - before.log_lines.get(name, 0) > log_max:
            out.append(f"logs/{name}: {lines - before.log_lines.get(name, 0)} lines added")
    return out


def _lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def _post(url: str, body: Any, timeout: float) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")
