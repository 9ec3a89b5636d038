"""Machines on a LAN, made on one machine: each host a network namespace (its own interfaces,
routes and ports) with one veth link to a bridge in this machine's own namespace, which has the
segment's `.254` address (so the tests reach every host, as a machine elsewhere on the LAN
would). A host may have a default route (via the bridge) or none, as on a direct cable.

Processes started in a host share this machine's files: a node's home, its control and bus
sockets (ipc paths) work as in any other test; only its network is the namespace's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass, field


def ip(*argv: str, ns: str = "") -> None:
    cmd = ["ip", "netns", "exec", ns, "ip", *argv] if ns else ["ip", *argv]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")


def unavailable() -> str | None:
    """Why namespaces cannot be made here (the tests skip with it), or None."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are a Linux feature"
    if os.geteuid() != 0:
        return "making network namespaces and a bridge needs root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = f"skprobe{uuid.uuid4().hex[:6]}"
    try:
        ip("netns", "add", probe)
        ip("netns", "del", probe)
        ip("link", "add", probe[:15], "type", "bridge")
        ip("link", "del", probe[:15])
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return f"this machine refuses network namespaces or bridges: {exc}"
    return None


@dataclass
class Host:
    ns: str
    address: str
    dev: str  # its end of the veth link, inside the namespace
    gateway: str

    def command(self, *argv: str) -> tuple[str, ...]:
        """`argv` run inside this host's network namespace."""
        return ("ip", "netns", "exec", self.ns, *argv)

    def http_status(self, url: str, method: str = "GET") -> int:
        """The status a client on this host gets for `url` (an HTTP error is an answer too)."""
        script = ("import sys, urllib.request, urllib.error\n"
                  "req = urllib.request.Request(sys.argv[1], method=sys.argv[2], data=b'{}' if sys.argv[2] != 'GET' "
                  "else None, headers={'Content-Type': 'application/json'})\n"
                  "try:\n    print(urllib.request.urlopen(req, timeout=10).status)\n"
                  "except urllib.error.HTTPError as e:\n    print(e.code)")
        out = subprocess.run(self.command(sys.executable, "-c", script, url, method), capture_output=True,
                             text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return int(out.stdout.strip())

    def link(self, up: bool, default_route: bool) -> None:
        """Take the host's interface down or bring it back (with its default route, if it had one:
        the kernel drops the route with the link)."""
        ip("link", "set", self.dev, "up" if up else "down", ns=self.ns)
        if up and default_route:
            ip("route", "replace", "default", "via", self.gateway, ns=self.ns)


@dataclass
class Segment:
    """A bridge and the hosts on it; `close()` removes every namespace and link it made."""

    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:4])
    hosts: list[Host] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = int(self.tag, 16)
        self.prefix = f"10.{200 + n % 50}.{n % 250}"
        self.bridge = f"skb{self.tag}"
        self.gateway = f"{self.prefix}.254"
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def host(self, default_route: bool) -> Host:
        i = len(self.hosts) + 1
        ns, inner, outer = f"sk{self.tag}h{i}", f"skv{self.tag}{i}", f"skp{self.tag}{i}"
        ip("netns", "add", ns)
        host = Host(ns, f"{self.prefix}.{i}", inner, self.gateway)
        self.hosts.append(host)
        ip("link", "add", inner, "type", "veth", "peer", "name", outer)
        ip("link", "set", inner, "netns", ns)
        ip("link", "set", outer, "master", self.bridge)
        ip("link", "set", outer, "up")
        ip("addr", "add", f"{host.address}/24", "dev", inner, ns=ns)
        ip("link", "set", "lo", "up", ns=ns)
        host.link(up=True, default_route=default_route)
        return host

    def close(self) -> None:
        for host in self.hosts:
            subprocess.run(["ip", "netns", "del", host.ns], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=10)
