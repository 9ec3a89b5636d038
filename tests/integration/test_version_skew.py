"""Nodes on different versions: a node whose cluster protocol this node cannot read is refused
with both versions named, and never half-joined; a member on another version it can read is a
cluster warning in `/state` and on the dashboard (in a real browser)."""

from __future__ import annotations

import threading
import time
import uuid

import zmq
from playwright.sync_api import expect

from skulk.cluster.state import NodeInfo
from skulk.services.gossip.service import namespace_hash
from skulk.wire import codec
from skulk.wire.cluster import PeerHello
from tests.integration.browser import browser  # noqa: F401 - the fixture
from tests.integration.cluster import state_of
from tests.integration.harness import Node, wait_until
from tests.integration.serving import http_json
from tests.unit.builders import newer_hello
from tools.ports import free_port


def test_a_hello_of_a_newer_protocol_is_refused_naming_both_versions(nodes):
    node = nodes()
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://127.0.0.1:{node.cluster_port}")
    try:
        log = node.home / "logs" / "gossip.log"

        def refused() -> str | None:
            sock.send(newer_hello("9.9.9"))  # hellos are lossy: say it until it is heard
            return next((ln for ln in log.read_text().splitlines() if "refused node zz" in ln), None)
        line = wait_until(node, refused, 15, "the refusal in the gossip log")
    finally:
        sock.close()
    assert "skulk 9.9.9" in line and "this node (skulk " in line, line
    assert list(http_json(f"{node.url}/state")[1]["nodeIdentities"]) == [http_json(f"{node.url}/node_id")[1]]


class FakeGossipPeerOfAnOlderVersion(threading.Thread):
    """Not a node: says gossip hellos (today's protocol, readable) for a member running skulk 0.0.1,
    every 0.2 s until stopped, so the real node lists it among its members."""

    def __init__(self, node: Node, namespace: str) -> None:
        super().__init__(daemon=True)
        self.node, self.namespace, self.halt = node, namespace, threading.Event()
        info = NodeInfo(node_id="old-node", friendly_name="old-mac", skulk_version="0.0.1", ram_total=1 << 34,
                        ram_available=1 << 33, when=time.time(), addresses=("127.0.0.1",))
        self.hello = codec.encode(PeerHello(namespace=namespace_hash(namespace), info=info,
                                            gossip_port=free_port(), master_port=free_port()))

    def run(self) -> None:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(f"tcp://127.0.0.1:{self.node.cluster_port}")
        try:
            while not self.halt.wait(0.2):
                sock.send(self.hello, zmq.NOBLOCK)
        finally:
            sock.close()


def test_a_member_on_another_version_is_a_warning_in_state_and_on_the_dashboard(nodes, browser):  # noqa: F811
    namespace = f"skew-{uuid.uuid4().hex[:8]}"
    node = nodes(args=("--namespace", namespace))
    peer = FakeGossipPeerOfAnOlderVersion(node, namespace)
    peer.start()
    try:
        warnings = wait_until(node, lambda: (state_of(node) or {}).get("clusterWarnings"), 30,
                              "the version warning in /state")
        (warning,) = warnings
        assert warning["code"] == "version_mismatch" and warning["versions"]["0.0.1"] == ["old-mac"], warning
        page = browser.pages[0] if browser.pages else browser.new_page()
        page.goto(f"{node.url}/")
        shown = page.get_by_test_id("cluster-warning")
        expect(shown).to_contain_text("version_mismatch")
        expect(shown).to_contain_text("0.0.1 on old-mac")
    finally:
        peer.halt.set()
        peer.join(timeout=5)
