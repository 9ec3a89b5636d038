"""Where LAN discovery announces (pure): each interface's directed broadcast address, never the
limited broadcast, which leaves only by a default route."""

from __future__ import annotations

from skulk.services.gossip.discovery import Interface, broadcast_targets, directed_broadcast

NICS = [Interface("lo", "127.0.0.1", "255.0.0.0", True),
        Interface("eth0", "192.168.1.20", "255.255.255.0", True),
        Interface("tb0", "10.9.0.1", "255.255.0.0", True),
        Interface("down0", "172.16.0.5", "255.255.255.0", False),
        Interface("tun0", "10.8.0.2", "255.255.255.255", True, point_to_point=True),
        Interface("p2p", "10.7.0.0", "255.255.255.254", True)]


def test_every_interface_that_is_up_and_has_a_broadcast_address_when_listening_on_all():
    assert broadcast_targets("0.0.0.0", NICS) == [("10.9.255.255", "tb0"), ("192.168.1.255", "eth0")]


def test_only_the_interface_holding_the_listen_address():
    assert broadcast_targets("10.9.0.1", NICS) == [("10.9.255.255", "tb0")]
    assert broadcast_targets("172.16.0.5", NICS) == []  # its interface is down
    assert broadcast_targets("10.1.1.1", NICS) == []  # an address this machine does not hold (yet)


def test_a_loopback_node_never_announces():
    assert broadcast_targets("127.0.0.1", NICS) == []
    assert broadcast_targets("::1", NICS) == []


def test_networks_without_a_broadcast_address():
    assert directed_broadcast("10.7.0.0", "255.255.255.254") is None
    assert directed_broadcast("10.8.0.2", "255.255.255.255") is None
    assert directed_broadcast("10.0.0.7", "") is None  # no netmask reported
    assert directed_broadcast("10.0.0.7", "255.255.255.0") == "10.0.0.255"
