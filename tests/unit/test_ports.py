"""Test and benchmark node ports come from below the ephemeral range, where no outgoing
connection can take them between the probe and the node's bind."""

from __future__ import annotations

import socket

import pytest

from skulk.cluster.placement import RING_PORTS
from tools import ports


def test_ports_are_below_the_ephemeral_and_ring_ranges_and_never_repeat():
    seen: set[int] = set()
    for _ in range(50):
        port = ports.free_port(pair=True)
        assert ports.LOWEST <= port and port + 1 < ports.ephemeral_first() and port + 1 < RING_PORTS[0]
        assert port not in seen and port + 1 not in seen
        seen.update((port, port + 1))
        for p in (port, port + 1):
            with socket.socket() as s:
                s.bind(("127.0.0.1", p))


def _two_bindable(start: int) -> int:
    """A port p from `start` on such that p and p + 1 are free now (a node of an earlier test,
    or its TIME_WAIT, may hold any fixed one)."""
    for p in range(start, start + 2000, 2):
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", p))
                b.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    raise AssertionError("no two free ports to test with")


def test_a_held_port_is_never_handed_out(monkeypatch):
    low = _two_bindable(29000)
    monkeypatch.setattr(ports, "LOWEST", low)
    monkeypatch.setattr(ports, "DEFAULT_EPHEMERAL_FIRST", low + 4)
    monkeypatch.setattr(ports, "_handed_out", set())
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", low))
        holder.listen()
        assert ports.free_port() == low + 1
        with pytest.raises(RuntimeError, match="no free loopback port"):
            ports.free_port()
