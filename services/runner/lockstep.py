"""The channel that keeps the ranks of a sharded instance in step: rank 0's control ROUTER,
each follower's DEALER (routing id `rank<r>`), one `RankStep` per batch step.

ZeroMQ over one TCP connection neither drops nor reorders, and neither side has a high-water
mark here (a follower is at most a step behind: every step meets in a collective), so a
decision is never lost. Rank 0 waits for every follower's `RankHello` before it reports ready,
so it can address each; a follower it cannot reach any more fails the step (the instance is
then lost and re-created, its requests end with an error).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import zmq

from skulk.node import exitcodes
from skulk.services.base import PeerLost
from skulk.wire import codec, curve
from skulk.wire.errors import UnexpectedMessage, WireError
from skulk.wire.inference import RankHello, RankStep
from skulk.wire.refusals import Refusals, peer_of
from skulk.wire.sockets import make_socket, recv_routed, send

MAX_STEP_BYTES = 1 << 30
"""A step carries every joiner's prompt ids (about 4 bytes a token): 16 prompts of 1M tokens fit."""
MAX_HELLO_BYTES = 64 * 1024
"""What rank 0's control ROUTER takes in: followers send only a `RankHello` (steps go out)."""
HELLO_HWM = 1000
REFUSALS = Refusals("runner: rank control port", logging.getLogger("skulk.runner"))


class FollowerUnreachable(PeerLost):
    """Rank 0 could not hand a step to a follower (its process or its link is gone)."""

    exit_code = exitcodes.PEER_LOST


class Leader:
    def __init__(self, ctx: zmq.Context[Any], listen: str, port: str, followers: int) -> None:
        self.sock = make_socket(ctx, zmq.ROUTER, hwm=0, max_msg_bytes=MAX_HELLO_BYTES, bind=f"tcp://{listen}:{port}")
        self.sock.setsockopt(zmq.RCVHWM, HELLO_HWM)  # steps out never drop (hwm 0); little comes in
        self.expected = followers
        self.peers: list[bytes] = []

    def wait_hellos(self, deadline_s: float) -> None:
        """Every follower's hello, or a RuntimeError at the deadline (a rank never came up)."""
        end = time.monotonic() + deadline_s
        while len(self.peers) < self.expected:
            left = end - time.monotonic()
            if left <= 0 or not self.sock.poll(int(left * 1000) + 1):
                raise RuntimeError(f"only {len(self.peers)} of {self.expected} follower ranks said hello "
                                   f"within {deadline_s:.0f}s")
            try:
                envelope, msg = recv_routed(self.sock, flags=zmq.NOBLOCK)
            except (zmq.Again, WireError):
                continue
            if isinstance(msg, RankHello) and envelope[0] not in self.peers:
                self.peers.append(envelope[0])

    def discard(self) -> None:
        """After the hellos nothing may arrive (the service reads this socket from then on): a
        stranger's frames are read and refused, logged once per peer, never left to pile up."""
        for _ in range(HELLO_HWM):
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            REFUSALS.refuse(peer_of(frames[:1]), UnexpectedMessage("a frame after the ranks said hello"),
                            time.monotonic())

    def broadcast(self, step: RankStep) -> None:
        frame = codec.encode(step)
        for peer in self.peers:
            try:
                self.sock.send_multipart([peer, frame], zmq.NOBLOCK)
            except zmq.ZMQError as exc:
                raise FollowerUnreachable(f"rank step {step.seq} could not reach {peer.decode()}: {exc}") from None


class Follower:
    def __init__(self, ctx: zmq.Context[Any], control: str, rank: int) -> None:
        self.sock = make_socket(ctx, zmq.DEALER, hwm=0, max_msg_bytes=MAX_STEP_BYTES)
        self.sock.setsockopt(zmq.ROUTING_ID, f"rank{rank}".encode())
        curve.connect(self.sock, f"tcp://{control}")  # secured with the cluster key, if any
        send(self.sock, RankHello(rank=rank))
        self.expected_seq = 1

    def steps(self) -> list[RankStep]:
        """The steps that have arrived, in order (non-blocking)."""
        out: list[RankStep] = []
        while True:
            try:
                frame = self.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return out
            msg = codec.decode(frame, max_bytes=MAX_STEP_BYTES)
            if isinstance(msg, RankStep):
                out.append(msg)
