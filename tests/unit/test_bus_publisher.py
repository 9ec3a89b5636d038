"""A role's publisher into its node's bus holds what it publishes until the bus has subscribed
(real ZeroMQ sockets over ipc: the bus here is an XSUB, as the node's bus proxy is)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from skulk.wire import codec
from skulk.wire.events import ServiceStatus
from skulk.wire.sockets import HELD_MAX, BusPublisher, make_socket, publish
from skulk.wire.topics import EVT_SERVICE


def status(seq: int) -> ServiceStatus:
    return ServiceStatus(role="janitor", child_id="janitor", pid=1, seq=seq, uptime_s=0.0)


def bus(ctx: zmq.Context[Any], endpoint: str) -> zmq.Socket[Any]:
    """The bus's side: bound late, subscribed to every event (as `services/bus` subscribes)."""
    xsub = make_socket(ctx, zmq.XSUB, bind=endpoint)
    xsub.send(b"\x01evt.")
    return xsub


def joined(pub: BusPublisher, xsub: zmq.Socket[Any], deadline_s: float = 30.0) -> None:
    """What a role's loop does: wait for the socket to be readable, then `on_readable` (the
    bus's own loop polls its XSUB meanwhile: ZeroMQ attaches a new peer, and sends it the
    cached subscriptions, when the bound socket's thread next calls into it)."""
    end = time.monotonic() + deadline_s
    while not pub.joined and time.monotonic() < end:
        xsub.poll(0, zmq.POLLOUT)
        if pub.sock.poll(50, zmq.POLLIN):
            pub.on_readable()
    assert pub.joined, "the bus's subscription never reached the publisher"


@pytest.fixture
def link(tmp_path: Path) -> Iterator[tuple[zmq.Context[Any], str]]:
    """A context of its own and the bus's endpoint; every socket dropped at the end."""
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        yield ctx, f"ipc://{tmp_path}/bus-in.sock"
    finally:
        ctx.destroy(linger=0)


def received(sock: zmq.Socket[Any], count: int, deadline_s: float = 30.0) -> list[int]:
    seqs = []
    end = time.monotonic() + deadline_s
    while len(seqs) < count and sock.poll(max(1, int((end - time.monotonic()) * 1000)), zmq.POLLIN):
        _topic, payload = sock.recv_multipart()
        seqs.append(codec.decode(payload).seq)
    return seqs


def test_what_is_published_before_the_bus_is_up_reaches_it_in_order(link: tuple[zmq.Context[Any], str]):
    ctx, endpoint = link
    pub = BusPublisher(ctx, endpoint)
    plain = make_socket(ctx, zmq.PUB, connect=endpoint)  # what every role had: the control
    for seq in range(3):
        pub.publish(EVT_SERVICE, status(seq))
        publish(plain, EVT_SERVICE, status(100 + seq))
    assert not pub.joined
    xsub = bus(ctx, endpoint)
    joined(pub, xsub)
    pub.publish(EVT_SERVICE, status(3))
    assert received(xsub, 4) == [0, 1, 2, 3]  # and none of the plain PUB's: it dropped them


def test_it_holds_the_newest_it_can_keep_and_never_blocks(link: tuple[zmq.Context[Any], str]):
    ctx, endpoint = link
    pub = BusPublisher(ctx, endpoint)
    for seq in range(HELD_MAX + 5):
        pub.publish(EVT_SERVICE, status(seq))  # never blocks, whatever the count
    xsub = bus(ctx, endpoint)
    joined(pub, xsub)
    assert received(xsub, HELD_MAX) == list(range(5, HELD_MAX + 5))


def test_subscriptions_that_come_later_are_read_not_kept(link: tuple[zmq.Context[Any], str]):
    ctx, endpoint = link
    pub = BusPublisher(ctx, endpoint)
    xsub = bus(ctx, endpoint)
    joined(pub, xsub)
    for n in range(50):  # subscribers of the bus come and go: each prefix reaches the publisher
        xsub.send(b"\x01evt.service.x%d" % n)
    pub.publish(EVT_SERVICE, status(1))
    assert received(xsub, 1) == [1]
    end = time.monotonic() + 30
    while pub.sock.poll(100, zmq.POLLIN) and time.monotonic() < end:
        pub.on_readable()
    assert not pub.sock.poll(0, zmq.POLLIN)
