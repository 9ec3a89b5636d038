"""Where LAN discovery announces: the directed broadcast address of each IPv4 interface the node
listens on (every interface that is up for `0.0.0.0`, the one holding the address otherwise).

The limited broadcast (255.255.255.255) leaves only by the default route: on a link that has
none (a direct cable, a Thunderbolt bridge between two Macs, a lab switch with no router) it
fails with "network unreachable" and nodes never meet. A directed broadcast (`10.0.0.255` for
`10.0.0.7/24`) goes out on its own interface, default route or not. A node that listens on
loopback only never announces (nobody could reach it)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

ANY = ("0.0.0.0", "", "::")


@dataclass(frozen=True, slots=True)
class Interface:
    name: str
    address: str
    netmask: str
    up: bool
    point_to_point: bool = False


def directed_broadcast(address: str, netmask: str) -> str | None:
    """The interface's broadcast address, or None where its network has none (/31, /32)."""
    try:
        net = ipaddress.IPv4Network(f"{address}/{netmask}", strict=False)
    except ValueError:
        return None
    return str(net.broadcast_address) if net.prefixlen < 31 else None


def broadcast_targets(listen: str, nics: Iterable[Interface]) -> list[tuple[str, str]]:
    """`(broadcast address, interface name)` for each interface to announce on, sorted."""
    if listen not in ANY and (listen.startswith("127.") or listen == "::1"):
        return []
    out = set()
    for nic in nics:
        if not nic.up or nic.point_to_point or nic.address.startswith("127."):
            continue
        if listen not in ANY and nic.address != listen:
            continue
        if (target := directed_broadcast(nic.address, nic.netmask)) is not None:
            out.add((target, nic.name))
    return sorted(out)


def interfaces() -> list[Interface]:
    """This machine's IPv4 interfaces as the kernel reports them now (they come and go)."""
    stats = psutil.net_if_stats()
    return [Interface(name, a.address, a.netmask or "", name in stats and stats[name].isup, bool(a.ptp))
            for name, addrs in psutil.net_if_addrs().items() for a in addrs
            if a.family == socket.AF_INET]
