"""What an address names, read the same way by every process that judges one: the supervisor
(a cluster listening beyond this machine without a key), the API (a node listening on loopback;
a client on this machine). They judge a bind address from the config, a peer's address as a
socket reports it, or a host name, so each form below is one answer everywhere."""

from __future__ import annotations

import ipaddress
import socket

import psutil


def plain_address(address: str) -> str:
    """An IPv4-mapped IPv6 address (`::ffff:10.0.0.2`, as a dual-stack socket reports a client)
    as the IPv4 address nodes advertise; anything else as given."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped) if mapped else address


def is_loopback(address: str) -> bool:
    """An address only this machine reaches: `localhost`, `127.0.0.0/8`, `::1` (a zone suffix
    such as `%lo` ignored) and `::ffff:127.x.x.x`, the IPv4-mapped form a dual-stack socket
    reports a loopback client in (which `ipaddress` alone calls not loopback before Python 3.13).
    Any other name, and anything unparsable, is not."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(plain_address(address).split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def machine_addresses() -> frozenset[str]:
    """Every address of this machine's interfaces, read now (addresses come and go)."""
    return frozenset(plain_address(a.address.split("%", 1)[0]) for addrs in psutil.net_if_addrs().values()
                     for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6))
