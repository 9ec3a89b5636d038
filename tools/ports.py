"""Free loopback ports for the nodes that tests and benchmarks start.

Asking the kernel for port 0 hands out a port from the ephemeral range, the same range every
outgoing connection takes its local port from: between the probe and the node's bind, another
node's connection may take it ("Address already in use", seen in CI). So ports come from below
the ephemeral range (and below the ring ports, `wire.placement.RING_PORTS`), where no outgoing
connection lands, and this process never hands out the same port twice.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

LOWEST = 20000
DEFAULT_EPHEMERAL_FIRST = 32768
MIN_SHARE = 1000  # ports a parallel test worker's slice holds at least
_handed_out: set[int] = set()
_rng = random.Random(os.getpid())


def ephemeral_first() -> int:
    """The first port of this machine's ephemeral range (Linux; 32768 where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_FIRST


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _share(lowest: int, highest: int) -> tuple[int, int]:
    """This process's part of [lowest, highest): the whole range, or, in a parallel test run
    (pytest-xdist names each worker `gwN` and says how many there are), the worker's own slice,
    so two workers never hand out the same port between a probe and a node's bind."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not worker.startswith("gw") or not count.isdigit() or int(count) < 2 \
            or (highest - lowest) // int(count) < MIN_SHARE:
        return lowest, highest  # (a narrow range, as a test of this module makes, is not split)
    n, size = int(worker[2:]) % int(count), (highest - lowest) // int(count)
    return lowest + n * size, lowest + (n + 1) * size


def free_port(pair: bool = False) -> int:
    """A loopback TCP port nobody holds (and port + 1 too when `pair`), outside the ephemeral range."""
    highest = min(ephemeral_first(), DEFAULT_EPHEMERAL_FIRST) - 2
    if highest <= LOWEST:
        raise RuntimeError(f"no port range below the ephemeral range (it starts at {ephemeral_first()})")
    lowest, highest = _share(LOWEST, highest)
    candidates = list(range(lowest, highest))
    _rng.shuffle(candidates)
    for port in candidates:
        wanted = (port, port + 1) if pair else (port,)
        if any(p in _handed_out for p in wanted) or not all(_bindable(p) for p in wanted):
            continue
        _handed_out.update(wanted)
        return port
    _handed_out.clear()
    raise RuntimeError(f"no free loopback port in {LOWEST}-{highest}")
