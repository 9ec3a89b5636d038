"""Membership across nodes: hellos over TCP (ROUTER bound on the cluster port, a DEALER per
known peer), optional UDP broadcast discovery, liveness expiry, and the live member list
published on the local bus for the master.

A hello from another namespace is refused and logged; frames that do not decode are logged and
dropped. Peers are dialled by IP only (advertised addresses or configured bootstrap peers).
Node names are unique in a cluster: who yields on a clash is decided in `names.py`; a node
that must not join takes its derived name where it was given none (`node/node_identity.py`),
else says so (ERROR, and in its status) and stays a cluster of one.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import time
from typing import Any

import psutil
import zmq
from zmq.utils.monitor import recv_monitor_message

from skulk.cluster.state import NodeInfo
from skulk.node.eventlog_files import read_mode
from skulk.node.model_store import same_name
from skulk.node.node_identity import remember, remembered
from skulk.node.role_args import GossipArgs
from skulk.services.base import ServiceLoop
from skulk.services.gossip.discovery import broadcast_targets, interfaces
from skulk.services.gossip.names import Clash, Named, judge
from skulk.services.gossip.peers import (
    PeerTable,
    announcement,
    first_gossip_of_node,
    parse_announcement,
    pick_address,
    quiet_period,
    view_complete,
)
from skulk.wire import curve
from skulk.wire.accelerator import gather
from skulk.wire.cluster import Member, Membership, PeerHello
from skulk.wire.engines import engines_here
from skulk.wire.errors import UnexpectedMessage, UnknownMessage, WireError
from skulk.wire.refusals import Refusals, peer_of
from skulk.wire.sockets import RoutedDecodeError, drain, make_socket, recv_routed, send
from skulk.wire.topics import EVT_CLUSTER
from skulk.wire.version import peer_versions, skew_refusal, skulk_version

log = logging.getLogger("skulk.gossip")

MAX_PEER_FRAME = 1024 * 1024
HELLO_INTERVAL_S = 0.25
DISCONNECT_GRACE_S = 1.0
QUIET_MAX_S = 3.0
"""Longest a (re)started gossip listens before its first membership (see `quiet_until`)."""
"""After our TCP link to a peer drops, how long its node has to say hello again before it is
declared gone: a killed node is noticed in this time instead of the peer timeout, while a
peer whose gossip role was restarted (back in well under a second) stays."""
DISCOVERY_INTERVAL_S = 2.0
MEMBERSHIP_REFRESH_S = 1.0
"""A membership that only refreshes readings (free memory and disk, their time) is published at
most this often; a change of who is there, or of how to reach them, goes out with the next hello.
Every node's bus, event log, master and API handle each one: at the hello rate (4/s) that was most
of an idle node's CPU."""
LEARNED_TTL_S = 10.0


REFUSALS = Refusals("gossip: cluster port", log)


def _rejected(exc: WireError) -> None:
    if isinstance(exc, RoutedDecodeError) and isinstance(exc.cause, UnknownMessage) \
            and (theirs := peer_versions(exc.payload)) is not None:  # a newer node: never half-joined
        REFUSALS.refuse(peer_of(exc.envelope), UnknownMessage(skew_refusal(theirs, skulk_version(), PeerHello.VERSION)),
                        time.monotonic())
        return
    REFUSALS.refuse(peer_of(exc.envelope) if isinstance(exc, RoutedDecodeError) else "", exc, time.monotonic())


def namespace_hash(namespace: str) -> str:
    return hashlib.sha256(f"skulk-ns:{namespace}".encode()).hexdigest()[:32]


def local_addresses(listen: str) -> tuple[str, ...]:
    if listen not in ("0.0.0.0", "", "::"):
        return (listen,)
    addrs = [a.address for nics in psutil.net_if_addrs().values() for a in nics
             if a.family == socket.AF_INET and not a.address.startswith("127.")]
    return tuple(sorted(addrs)) or ("127.0.0.1",)



def membership_shape(members: list[Member]) -> tuple[tuple[object, ...], ...]:
    """What a membership says beyond fresh readings: who is there and how to reach them (a change
    here is published at once; readings of memory and disk ride the next refresh)."""
    return tuple(sorted((m.info.node_id, m.master_endpoint, m.info.friendly_name, m.info.addresses,
                         m.info.api_port, m.info.skulk_version, m.info.event_log_mode, m.info.event_log_reason,
                         m.info.ram_total, m.info.disk_total, m.info.accelerator, m.info.engines) for m in members))

class Gossip:
    def __init__(self, loop: ServiceLoop, args: GossipArgs) -> None:
        self.loop = loop
        self.args = args
        self.ns_hash = namespace_hash(args.namespace)
        self.addresses = local_addresses(args.listen)
        self.announcing: list[tuple[str, str]] | None = None  # where LAN discovery last announced
        self.table = PeerTable(args.node_id, args.peer_timeout)
        self.router = make_socket(loop.ctx, zmq.ROUTER, max_msg_bytes=MAX_PEER_FRAME,
                                  bind=f"tcp://{args.listen}:{args.port}")
        self.dealers: dict[str, zmq.Socket[Any]] = {}
        self.monitors: dict[str, zmq.Socket[Any]] = {}
        self.redial: set[str] = set()  # dialled endpoints whose handshake failed: re-made at the next hello
        self.redialled: dict[str, float] = {}  # endpoint -> when it was last re-made (monotonic)
        self.bootstrap = set(args.peers)
        self.learned: dict[str, float] = {}  # endpoint -> until (monotonic), from peers or UDP
        self.started = time.time()
        # `me.name` is the name this node goes by: its derived one once it took that (a gossip
        # role restarted after taking it keeps it), else the one it was given
        taken = bool(args.derived_name) and same_name(remembered(loop.rt.args.home), args.derived_name)
        self.me = Named(args.node_id, args.derived_name if taken else args.node_name, args.started)
        self.refused = ""  # why this node does not join (a name clash); "" while it may
        self.published_shape: tuple[tuple[object, ...], ...] = ()
        self.published_at = 0.0
        self.warned: set[tuple[str, str]] = set()  # (ignored node, holder) pairs already logged
        first = first_gossip_of_node(loop.rt.args.run_dir, args.started)
        discovery = args.discovery_port > 0 and not args.listen.startswith("127.")
        self.quiet_until = time.monotonic() + quiet_period(first, bool(self.bootstrap), discovery,
                                                           min(args.peer_timeout, QUIET_MAX_S))
        """A gossip (re)started publishes no membership before it has listened for a peer timeout
        (peers dial in too, so even a node without bootstrap peers may have some): its first,
        lonely one would tell the leader's master that every other node was gone (found by the
        chaos soak: their instances were deleted). Live peers hello four times a second, so a
        long configured timeout does not make it wait longer than QUIET_MAX_S, and once every
        node it knows of (configured, or named in the peers' hellos) has said hello, its view
        is whole and it publishes at once (`view_complete`): nodes started together form a
        second sooner. A node's first gossip with no way to find peers of its own (no bootstrap
        peers, no LAN discovery) has nobody to wrong: it publishes at once (`quiet_period`), so
        a lone node leads, and serves, a second and a half sooner."""

    def info(self) -> NodeInfo:
        mem = psutil.virtual_memory()
        disk = psutil.disk_usage(str(self.loop.rt.args.home))
        mode, reason = read_mode(self.loop.rt.args.home / "eventlog")
        return NodeInfo(node_id=self.args.node_id, friendly_name=self.me.name,
                        skulk_version=self.args.version, ram_total=int(mem.total),
                        ram_available=int(mem.available), when=time.time(),
                        addresses=self.addresses, disk_total=int(disk.total),
                        disk_available=int(disk.free), api_port=self.args.api_port,
                        event_log_mode=mode, event_log_reason=reason,
                        accelerator=gather(int(mem.total), self.args.accel),
                        engines=engines_here(self.args.engine))

    def hello(self) -> None:
        msg = PeerHello(namespace=self.ns_hash, info=self.info(), gossip_port=self.args.port,
                        master_port=self.args.master_port, known=tuple(sorted(self.table.endpoints())),
                        started=self.args.started, name_given=not self.args.derived_name)
        for endpoint in self.redial & set(self.dealers):  # re-made below, probing the server's key
            log.info("gossip: handshake with %s failed during a key rotation; dialling it again", endpoint)
            self.unwatch(endpoint)
            self.dealers.pop(endpoint).close(0)
            self.redialled[endpoint] = time.monotonic()
        self.redial.clear()
        for endpoint in sorted(self.bootstrap | set(self.learned) | self.table.endpoints()):
            sock = self.dealers.get(endpoint)
            if sock is None:
                sock = make_socket(self.loop.ctx, zmq.DEALER, hwm=10, max_msg_bytes=MAX_PEER_FRAME,
                                   connect=f"tcp://{endpoint}", redials=True)
                self.dealers[endpoint] = sock
                self.watch(endpoint, sock)
            try:
                send(sock, msg, flags=zmq.NOBLOCK)
            except zmq.Again:
                pass  # peer not connected or slow: hellos are lossy by design
        self.publish(msg.info)

    def on_frame(self, sock: zmq.Socket[Any]) -> None:
        for env, msg in drain(sock, recv_routed, limit=200, on_error=_rejected):
            if not isinstance(msg, PeerHello):
                REFUSALS.refuse(peer_of(env), UnexpectedMessage(f"ignored {msg.TYPE}"), time.monotonic())
                continue
            if msg.namespace != self.ns_hash:
                REFUSALS.refuse(peer_of(env), UnexpectedMessage(
                    f"refused node {msg.info.node_id} from another namespace"), time.monotonic())
                continue
            address = pick_address(msg.info.addresses, None)
            if address is None or self.refused:
                continue
            for endpoint in msg.known:  # transitive discovery, before anything is published: a
                self.learn(endpoint)   # restarted gossip's view is whole only once these said hello
            if not self.admit(msg, address):
                continue
            if self.table.heard(msg, address, time.monotonic()):
                log.info("gossip: node %s (%s) joined at %s", msg.info.node_id,
                         msg.info.friendly_name, address)
                self.publish(self.info())

    # ---- unique node names (decided in names.py) ----------------------------------------------
    def admit(self, msg: PeerHello, address: str) -> bool:
        """Whether a hello's node may be a member, by its name; acts on a clash."""
        sender = Named(msg.info.node_id, msg.info.friendly_name, msg.started)
        members = [Named(n, p.hello.info.friendly_name, p.hello.started) for n, p in self.table.peers.items()]
        decision = judge(self.me, members, sender, self.args.derived_name)
        other = decision.other
        if decision.clash is Clash.TAKE_DERIVED:
            self.take_derived_name(sender, f"{address}:{msg.gossip_port}")
            return self.admit(msg, address)  # judged again under the new name
        if decision.clash is Clash.REFUSE_SELF:
            self.refuse(sender, f"{address}:{msg.gossip_port}")
            return False
        if decision.clash is Clash.IGNORE_SENDER and other is not None:
            if (sender.node_id, other.node_id) not in self.warned:
                self.warned.add((sender.node_id, other.node_id))
                if msg.name_given:
                    log.warning("gossip: node %s at %s calls itself %r, the name of node %s%s, which started "
                                "first: not admitted while that node is live", sender.node_id, address,
                                sender.name, other.node_id, " (this node)" if other == self.me else "")
                else:
                    log.info("gossip: node %s at %s, given no name, started as %r, the name of node %s%s: "
                             "it takes its derived name once it hears that node", sender.node_id, address,
                             sender.name, other.node_id, " (this node)" if other == self.me else "")
            self.learn(f"{address}:{msg.gossip_port}")  # so it hears the holder's hello and refuses
            return False
        if decision.clash is Clash.DROP_MEMBER and other is not None:
            log.warning("gossip: node %s was admitted under the name %r, but node %s holds it since "
                        "earlier: dropped", other.node_id, other.name, sender.node_id)
            self.table.peers.pop(other.node_id, None)
            self.publish(self.info())
        return True

    def take_derived_name(self, holder: Named, endpoint: str) -> None:
        """This node was given no name and its host name is held by a live node that started
        first: it goes by its derived name from now on (and at its later starts)."""
        taken, derived = self.me.name, self.args.derived_name
        self.me = Named(self.me.node_id, derived, self.me.started)
        try:
            remember(self.loop.rt.args.home, derived)
        except OSError as exc:  # a full disk: the name holds for this run, the next start asks again
            log.warning("gossip: cannot remember the name %r in %s: %s", derived, self.loop.rt.args.home, exc)
        log.info("gossip: node name %r is used by node %s at %s, which started first; this node, given "
                 "no name, goes by %r (set --node-name to choose one)", taken, holder.node_id, endpoint, derived)
        self.publish(self.info())

    def refuse(self, holder: Named, endpoint: str) -> None:
        """This node started after a live node of the same name: it leaves every peer and stays
        a cluster of one (until it is restarted with another name)."""
        self.refused = (f"refused to join: node name {self.me.name!r} is already used by node "
                        f"{holder.node_id} at {endpoint}, which started first; restart this node "
                        f"with another --node-name")
        log.error("gossip: %s", self.refused)
        self.table.peers.clear()
        self.bootstrap.clear()
        self.learned.clear()
        for dialled in list(self.dealers):
            self.unwatch(dialled)
            self.dealers.pop(dialled).close(0)
        self.publish(self.info())

    def learn(self, endpoint: str) -> None:
        if self.refused:
            return
        if endpoint not in self.table.endpoints() and endpoint not in self.bootstrap:
            self.learned[endpoint] = time.monotonic() + LEARNED_TTL_S

    def expire(self) -> None:
        gone = self.table.expire(time.monotonic())
        for node_id in gone:
            log.warning("gossip: node %s silent for %.1fs; declared gone", node_id, self.args.peer_timeout)
        if gone:
            self.publish(self.info())  # tell the master now, not at the next hello
        now = time.monotonic()
        self.learned = {e: t for e, t in self.learned.items() if t > now}
        live = self.table.endpoints() | self.bootstrap | set(self.learned)
        for endpoint in [e for e in self.dealers if e not in live]:
            self.unwatch(endpoint)
            self.dealers.pop(endpoint).close(0)
            self.redialled.pop(endpoint, None)

    # ---- TCP link monitoring -----------------------------------------------------------------
    def watch(self, endpoint: str, sock: zmq.Socket[Any]) -> None:
        monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED | curve.HANDSHAKE_FAILED)
        self.monitors[endpoint] = monitor
        self.loop.add_reader(monitor, lambda m: self.on_monitor(endpoint, m))

    def unwatch(self, endpoint: str) -> None:
        monitor = self.monitors.pop(endpoint, None)
        if monitor is not None:
            self.loop.remove_reader(monitor)
            self.dealers[endpoint].disable_monitor()
            monitor.close(0)

    def on_monitor(self, endpoint: str, monitor: zmq.Socket[Any]) -> None:
        for _ in range(64):
            try:
                event = recv_monitor_message(monitor, flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            if event["event"] & curve.HANDSHAKE_FAILED and endpoint not in self.redial and curve.redial_due(
                    curve.rotating(), self.redialled.get(endpoint), time.monotonic()):
                self.redial.add(endpoint)  # not here: this very monitor is being read
            if event["event"] == zmq.EVENT_DISCONNECTED:
                node_id = self.table.disconnected(endpoint, time.monotonic(), DISCONNECT_GRACE_S)
                if node_id is not None:
                    log.info("gossip: link to node %s (%s) dropped; %.1fs to say hello again",
                             node_id, endpoint, DISCONNECT_GRACE_S)

    def publish(self, me: NodeInfo) -> None:
        if time.monotonic() < self.quiet_until:
            heard = self.table.endpoints()
            own = {f"{a}:{self.args.port}" for a in self.addresses}
            if not view_complete(self.bootstrap | set(self.learned) | heard, heard, own):
                return
            self.quiet_until = 0.0  # every node it knows of said hello: the view is whole
        members = [Member(info=me, master_endpoint=f"tcp://{self.addresses[0]}:{self.args.master_port}")]
        members += [Member(info=p.hello.info, master_endpoint=f"tcp://{p.address}:{p.hello.master_port}")
                    for p in self.table.peers.values()]
        shape, now = membership_shape(members), time.monotonic()
        if shape == self.published_shape and now - self.published_at < MEMBERSHIP_REFRESH_S:
            return
        self.published_shape, self.published_at = shape, now
        self.loop.publish(EVT_CLUSTER, Membership(node_id=self.args.node_id, members=tuple(members)),
                          suffix="membership")
        self.loop.status_detail = self.refused or (f"node {self.me.name}: {len(members)} node(s), "
                                                   f"namespace {self.args.namespace}")

    # ---- LAN discovery ---------------------------------------------------------------------
    def open_discovery(self) -> socket.socket | None:
        try:
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if hasattr(socket, "SO_REUSEPORT"):
                udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            udp.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            udp.bind(("", self.args.discovery_port))
            udp.setblocking(False)
            return udp
        except OSError as exc:
            log.warning("gossip: LAN discovery off (UDP %d: %s)", self.args.discovery_port, exc.strerror)
            return None

    def announce(self, udp: socket.socket) -> None:
        """One datagram per interface the node listens on, to its directed broadcast address
        (`discovery.py`); the interfaces are read each time (a link goes down, comes back)."""
        targets = broadcast_targets(self.args.listen, interfaces())
        if targets != self.announcing:
            self.announcing = targets
            log.info("gossip: LAN discovery announces on %s", ", ".join(f"{ip} ({name})" for ip, name in targets)
                     or "no interface (none up with a broadcast address)")
        payload = announcement(self.ns_hash, self.args.node_id, self.args.port)
        for target, _name in targets:
            try:
                udp.sendto(payload, (target, self.args.discovery_port))
            except OSError:  # the interface went away since it was read: next time
                pass

    def on_discovery(self, udp: socket.socket) -> None:
        for _ in range(64):
            try:
                data, (host, _port) = udp.recvfrom(512)
            except (BlockingIOError, OSError):
                return
            port = parse_announcement(data, self.ns_hash, self.args.node_id)
            if port is not None:
                self.learn(f"{host}:{port}")


def setup(loop: ServiceLoop, argv: list[str]) -> None:
    args = GossipArgs.from_argv(argv)
    gather(int(psutil.virtual_memory().total), args.accel)  # before ready: nvidia-smi (up to 5 s) never inside a beat
    gossip = Gossip(loop, args)
    loop.add_reader(gossip.router, gossip.on_frame)
    loop.every(HELLO_INTERVAL_S, gossip.hello, first_in=0.0)
    loop.every(HELLO_INTERVAL_S / 2, gossip.expire)
    if args.discovery_port > 0 and not args.listen.startswith("127."):
        # LAN discovery only makes sense, and only sends traffic, when peers could reach us.
        udp = gossip.open_discovery()
        if udp is not None:
            loop.add_reader(udp, gossip.on_discovery)
            loop.every(DISCOVERY_INTERVAL_S, lambda: gossip.announce(udp), first_in=0.2)
    loop.status_detail = f"namespace {args.namespace}, port {args.port}"
