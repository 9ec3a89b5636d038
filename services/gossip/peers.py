"""The peer table (pure): who is alive, learned from hellos, expired by liveness timeout."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from skulk.wire.cluster import PeerHello


@dataclass
class Peer:
    hello: PeerHello
    address: str  # the IP we reach it on
    last_seen: float


@dataclass
class PeerTable:
    self_id: str
    timeout_s: float
    peers: dict[str, Peer] = field(default_factory=dict)

    def heard(self, hello: PeerHello, address: str, now: float) -> bool:
        """Record a hello; True when this node id is new (joined)."""
        node_id = hello.info.node_id
        if node_id == self.self_id:
            return False
        joined = node_id not in self.peers
        self.peers[node_id] = Peer(hello, address, now)
        return joined

    def expire(self, now: float) -> list[str]:
        """Node ids silent for longer than the timeout; they are dropped from the table."""
        gone = [n for n, p in self.peers.items() if now - p.last_seen > self.timeout_s]
        for n in gone:
            del self.peers[n]
        return gone

    def disconnected(self, endpoint: str, now: float, grace_s: float) -> str | None:
        """Our TCP link to `endpoint` dropped: its node must say hello again within `grace_s`
        or be declared gone (a killed node is noticed at once, a restarted gossip role has time
        to come back). The node id, or None for an endpoint of no known peer."""
        for node_id, peer in self.peers.items():
            if f"{peer.address}:{peer.hello.gossip_port}" == endpoint:
                peer.last_seen = min(peer.last_seen, now - self.timeout_s + grace_s)
                return node_id
        return None

    def endpoints(self) -> set[str]:
        return {f"{p.address}:{p.hello.gossip_port}" for p in self.peers.values()}


def view_complete(known: set[str], heard: set[str], own: set[str]) -> bool:
    """Whether a gossip that just (re)started has heard everyone it knows of: at least one peer,
    and every endpoint it knows (configured, learned from peers' hellos, its own excepted) is a
    peer that said hello. Then its membership is whole and it need not keep quiet any longer."""
    return bool(heard) and (known - own) <= heard


def quiet_period(first_of_node: bool, bootstrap: bool, discovery: bool, listen_s: float) -> float:
    """How long a gossip that just started keeps its membership to itself. Its first, lonely
    membership must not tell a master that leads a cluster that the others are gone, so a
    gossip role restarted inside a running node listens first (`listen_s`). The first gossip of
    a node that can find no peer by itself (no bootstrap peers, no LAN discovery) wrongs nobody
    by publishing at once: its master has no state of a cluster yet (a node's saved state is
    used only across its own in-place restart, which is not its first gossip), and peers that
    dial it are admitted at their first hello."""
    return 0.0 if first_of_node and not bootstrap and not discovery else listen_s


def first_gossip_of_node(run_dir: Path, node_started: float) -> bool:
    """Whether this is the first gossip process of this node's life (the node's start time,
    which an in-place restart keeps, marks it in `<run dir>/gossip.started`); on any doubt, not."""
    marker = run_dir / "gossip.started"
    stamp = repr(node_started)
    try:
        first = not marker.is_file() or marker.read_text() != stamp
        marker.write_text(stamp)
    except OSError:
        return False
    return first


def pick_address(advertised: tuple[str, ...], dialled_host: str | None) -> str | None:
    """The transport address for a peer: the one we dialled if it advertises it, else its
    first advertised address. Never a hostname: only what the peer advertised as an IP."""
    if dialled_host and dialled_host in advertised:
        return dialled_host
    return advertised[0] if advertised else dialled_host


def announcement(ns_hash: str, node_id: str, gossip_port: int) -> bytes:
    """The LAN discovery datagram: `skulk1 <namespace hash> <node id> <gossip port>`."""
    return f"skulk1 {ns_hash} {node_id} {gossip_port}".encode()


def parse_announcement(data: bytes, ns_hash: str, self_id: str) -> int | None:
    """The sender's gossip port, or None for garbage, another namespace, or ourselves."""
    parts = data.decode(errors="replace").split()
    if len(parts) != 4 or parts[0] != "skulk1" or parts[1] != ns_hash or parts[2] == self_id:
        return None
    if not parts[3].isdigit() or not 0 < int(parts[3]) < 65536:
        return None
    return int(parts[3])
