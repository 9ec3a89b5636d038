"""Test and benchmark node ports come from below the ephemeral range, where no outgoing
connection can take them between the probe and the node's bind."""

from __future__ import annotations

import socket

import pytest

from skulk.scripts import ports
from skulk.wire.placement import RING_PORTS


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


def test_a_held_port_is_never_handed_out(monkeypatch):
    monkeypatch.setattr(ports, "LOWEST", 29000)
    monkeypatch.setattr(ports, "DEFAULT_EPHEMERAL_FIRST", 29004)
    monkeypatch.setattr(ports, "_handed_out", set())
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 29000))
        holder.listen()
        assert ports.free_port() == 29001
        with pytest.raises(RuntimeError, match="no free loopback port"):
            ports.free_port()
