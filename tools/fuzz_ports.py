"""Every ZeroMQ port of a node, and a sender that fires `fuzz_frames` shots at them.

Cluster ports are reached from outside over TCP (gossip and master ROUTERs, a runner's
request ROUTER, a sharded instance's rank control ROUTER); node-local ports over ipc from
this process (the bus XSUB and XPUB, the master's local ROUTER, the supervisor's control
ROUTER and notify PULL, the eventlog's PULL, the tap's PUB). Each gets the socket type that
can talk to it, and frames in its layout (`[payload]`, `["", payload]` as a REQ would, or
`[topic, payload]`). Well-formed messages that a port acts on are never sent unless listed
in its `accepted` (a stranger injecting a valid command is the cluster key's matter,
wire/curve.py, not a robustness one); TCP ports also get raw non-ZMTP bytes.
"""

from __future__ import annotations

import random
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq

from skulk.wire import cluster as cl
from skulk.wire import codec, endpoints
from skulk.wire import commands as cmd
from skulk.wire import inference as inf
from skulk.wire.api_events import API_TOPICS, ChunkGenerated, RequestEnded, RequestRouted
from skulk.wire.config_sync import SetConfig
from skulk.wire.control import AdminCommand, ChildReady, Heartbeat
from skulk.wire.message import Message
from skulk.wire.staging import PurgeStaging
from skulk.wire.topics import ALL_TOPICS, EVT_RUNNER
from skulk.wire.tracing import SetTracing
from tools.fuzz_frames import FrameMaker

RECONNECT_EVERY = 200
"""Shots per connection: a fresh socket (a new peer identity) after that many."""
GOSSIP_MAX = 1024 * 1024
MASTER_MAX = 64 * 1024 * 1024
RANK_CONTROL_MAX = 64 * 1024

_COMMANDS: tuple[type[Message], ...] = (
    cmd.PlaceInstance, cmd.DeleteInstance, cmd.TextGeneration, cmd.TextEmbedding, cmd.TaskCancelled,
    cmd.TaskFinished, cmd.RestartNode, SetConfig, SetTracing, PurgeStaging)
_CLUSTER_ACTS: tuple[type[Message], ...] = (
    cl.Campaign, cl.LeaderAnnounce, cl.EventBatch, cl.LocalEvent, cl.ForwardCommand, cmd.RestartNode)
_BUS_TYPES = tuple(t for topic in ALL_TOPICS for t in topic.carries)


@dataclass(frozen=True)
class Target:
    name: str
    endpoint: str
    kind: int  # our socket type
    layouts: tuple[str, ...] = ("plain",)  # "plain": [payload]; "req": ["", payload]; "topic": [topic, payload]
    topics: tuple[bytes, ...] = ()
    accepted: tuple[type[Message], ...] = ()
    refused: tuple[type[Message], ...] = ()
    max_bytes: int = codec.MAX_FRAME_BYTES


def node_targets(home: Path, cluster_port: int, host: str = "127.0.0.1") -> list[Target]:
    """The ports every node has: cluster ports by TCP, node-local ones by ipc."""
    run = endpoints.run_dir(home.resolve())
    topics = tuple(t.prefix for t in ALL_TOPICS)
    return [
        Target("gossip", endpoints.tcp(host, cluster_port), zmq.DEALER, accepted=(cl.PeerHello,),
               max_bytes=GOSSIP_MAX),  # a stranger's hello: refused by its namespace
        Target("master", endpoints.tcp(host, cluster_port + 1), zmq.DEALER,
               accepted=(cl.RunnerLoad, cl.ReplayRequest), refused=_CLUSTER_ACTS, max_bytes=MASTER_MAX),
        Target("master-local", endpoints.master_local(run), zmq.DEALER, ("plain", "req"),
               accepted=(cmd.SnapshotRequest,), refused=_COMMANDS),
        Target("supervisor-control", endpoints.supervisor_control(run), zmq.DEALER, ("req", "plain"),
               refused=(AdminCommand,)),
        Target("supervisor-notify", endpoints.supervisor_notify(run), zmq.PUSH,
               accepted=(ChildReady, Heartbeat)),  # of no child: ignored
        Target("bus-in", endpoints.bus_in(run), zmq.PUB, ("topic", "plain"), topics=topics, refused=_BUS_TYPES),
        Target("bus-out", endpoints.bus_out(run), zmq.XSUB, ("plain",)),
        Target("tap", endpoints.bus_capture(run), zmq.XSUB, ("plain",)),
        Target("eventlog-in", endpoints.eventlog_in(run), zmq.PUSH, ("topic", "plain"), topics=API_TOPICS,
               refused=(ChunkGenerated, RequestRouted, RequestEnded)),
    ]


def runner_target(endpoint: str) -> Target:
    """A rank-0 runner's request ROUTER: well-formed requests with random values too."""
    return Target("runner", endpoint, zmq.DEALER, accepted=(inf.Generate, inf.Cancel, inf.Embed))


def rank_control_target(endpoint: str) -> Target:
    return Target("rank-control", endpoint, zmq.DEALER, refused=(inf.RankHello,), max_bytes=RANK_CONTROL_MAX)


@dataclass
class Counts:
    frames: Counter[str] = field(default_factory=Counter)  # target -> messages sent
    kinds: Counter[str] = field(default_factory=Counter)  # shot kind -> messages sent
    dropped: Counter[str] = field(default_factory=Counter)  # target -> not sent (our queue full)
    replies: Counter[str] = field(default_factory=Counter)  # target -> answers read back
    raw: Counter[str] = field(default_factory=Counter)  # target -> raw TCP connections

    def total(self) -> int:
        return sum(self.frames.values()) + sum(self.raw.values())


class _Link:
    """One target's socket and its frame maker; re-made every RECONNECT_EVERY shots."""

    def __init__(self, ctx: zmq.Context[Any], target: Target, rng: random.Random) -> None:
        self.ctx, self.target, self.rng = ctx, target, rng
        self.maker = FrameMaker(rng, target.max_bytes, target.accepted, target.refused)
        self.sock: zmq.Socket[Any] | None = None
        self.shots = 0

    def socket(self) -> zmq.Socket[Any]:
        if self.sock is None or self.shots % RECONNECT_EVERY == 0:
            if self.sock is not None:
                self.sock.close(0)
            self.sock = self.ctx.socket(self.target.kind)
            self.sock.setsockopt(zmq.LINGER, 0)
            self.sock.setsockopt(zmq.SNDHWM, 100)
            self.sock.setsockopt(zmq.RCVHWM, 100)
            self.sock.connect(self.target.endpoint)
        return self.sock

    def fire(self, counts: Counts) -> None:
        sock = self.socket()
        self.shots += 1
        shot = self.maker.shot()
        layout = self.rng.choice(self.target.layouts)
        frames = list(shot.frames)
        if self.target.kind == zmq.XSUB:  # subscriptions (\x01 prefix), cancels (\x00) or anything
            frames = [self.rng.choice((b"\x01", b"\x00", b"")) + frames[0][:self.rng.choice((0, 8, 4096))]]
        elif layout == "req":
            frames = [b"", *frames]
        elif layout == "topic":
            topic = self.rng.choice(self.target.topics) if self.rng.random() < 0.8 else self.maker.text().encode()
            frames = [topic + self.rng.choice((b"", b"x", b"head", b"event.Fuzz")), *frames]
        try:
            sock.send_multipart(frames, zmq.NOBLOCK)
            counts.frames[self.target.name] += 1
            counts.kinds[shot.kind] += 1
        except zmq.Again:
            counts.dropped[self.target.name] += 1
        self.read_back(counts)

    def read_back(self, counts: Counts) -> None:
        """Answers (a runner's Failed, the control socket's reply, bus traffic) are read and
        dropped, so nothing piles up on our side."""
        if self.sock is None or self.target.kind == zmq.PUSH or self.target.kind == zmq.PUB:
            return
        for _ in range(100):
            try:
                self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            counts.replies[self.target.name] += 1

    def raw(self, counts: Counts) -> None:
        """A TCP connection that speaks no ZMTP: random bytes, or a greeting cut short."""
        host, port = self.target.endpoint.removeprefix("tcp://").rsplit(":", 1)
        greeting = b"\xff" + b"\x00" * 8 + b"\x7f" + bytes([3, self.rng.choice((0, 1, 255))])
        data = self.rng.choice((self.rng.randbytes(self.rng.choice((1, 64, 70_000))), greeting,
                                greeting + b"NULL" + self.rng.randbytes(60)))
        try:
            with socket.create_connection((host, int(port)), timeout=2) as conn:
                conn.sendall(data)
            counts.raw[self.target.name] += 1
        except OSError:
            counts.dropped[self.target.name] += 1

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close(0)
            self.sock = None


def fire(targets: list[Target], seconds: float, seed: int, counts: Counts | None = None) -> Counts:
    """Shots at every target in turn until `seconds` have passed; returns the counts."""
    counts = counts or Counts()
    rng = random.Random(seed)
    ctx: zmq.Context[Any] = zmq.Context()
    links = [_Link(ctx, t, random.Random(rng.random())) for t in targets]
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            for link in links:
                if link.target.endpoint.startswith("tcp://") and rng.random() < 0.01:
                    link.raw(counts)
                else:
                    link.fire(counts)
    finally:
        for link in links:
            link.close()
        ctx.destroy(0)
    return counts


def runner_endpoints(home: Path, timeout: float = 10.0) -> dict[str, str]:
    """Runner id -> request endpoint, from the runners' reports on the node's tap (a Ready
    runner reports every 2 s; `/state` does not show endpoints)."""
    from skulk.wire.events import RunnerReport
    from skulk.wire.sockets import make_socket, recv_published

    ctx: zmq.Context[Any] = zmq.Context.instance()
    sub = make_socket(ctx, zmq.SUB, connect=endpoints.bus_capture(endpoints.run_dir(home.resolve())),
                      subscribe=(EVT_RUNNER.prefix,))
    found: dict[str, str] = {}
    end = time.monotonic() + timeout
    try:
        while (left := end - time.monotonic()) > 0 and sub.poll(int(left * 1000) + 1):
            _topic, msg = recv_published(sub)
            if isinstance(msg, RunnerReport) and msg.status.endpoint:
                found[msg.runner_id] = msg.status.endpoint
                if left < timeout - 2.5:  # every live runner has reported once
                    break
    finally:
        sub.close(0)
    return found


def rank_controls(home: Path, timeout: float = 10.0) -> list[str]:
    """The rank control endpoints of the sharded instances in the node's state (rank 0's host,
    `ring_port(instance, -1)`: what the worker gives each rank as `--control`)."""
    from skulk.cluster.placement import ring_port
    from skulk.wire.sockets import make_socket, recv, send

    ctx: zmq.Context[Any] = zmq.Context.instance()
    sock = make_socket(ctx, zmq.DEALER, connect=endpoints.master_local(endpoints.run_dir(home.resolve())))
    try:
        send(sock, cmd.SnapshotRequest(command_id="fuzz-snapshot"))
        if not sock.poll(int(timeout * 1000)):
            return []
        reply = recv(sock)
    finally:
        sock.close(0)
    if not isinstance(reply, cmd.StateSnapshot):
        return []
    return [f"tcp://{inst.ring_hosts[0].rsplit(':', 1)[0]}:{ring_port(iid, -1)}"
            for iid, inst in reply.state.instances.items() if len(inst.ring_hosts) > 1]
