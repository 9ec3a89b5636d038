"""LAN discovery across real network interfaces: nodes in separate network namespaces joined by
a bridge (tests/integration/netns.py), each listening on its own LAN address with no bootstrap
peers, as a new user starts them on a LAN. With and without a default route (a direct cable or
a Thunderbolt link has none: the limited broadcast cannot leave, the directed one can)."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from skulk.wire import curve
from skulk.wire.cluster import Membership
from skulk.wire.topics import EVT_CLUSTER
from tests.integration import netns
from tests.integration.harness import BusWatcher, Node, wait_until

WHY = netns.unavailable()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"no network namespaces here: {WHY}")

@pytest.fixture
def segment() -> Iterator[netns.Segment]:
    made = netns.Segment()
    try:
        yield made
    finally:
        made.close()


def start(nodes: Callable[..., Node], host: netns.Host, name: str, namespace: str, key: Path | None) -> Node:
    """A node on `host`, listening on its LAN address, given no peers and no name."""
    config = {"cluster": {"key_file": str(key)}} if key else None
    return nodes(name, config=config, args=("--listen", host.address, "--namespace", namespace),
                 command=host.command(sys.executable, "-m", "skulk.scripts.cli"))


def members(node: Node, count: int, timeout: float) -> set[str]:
    """The node ids of the first membership `node`'s gossip publishes with `count` members."""
    watcher = BusWatcher(node, EVT_CLUSTER.prefix)
    try:
        msg = watcher.wait_for(lambda m: isinstance(m, Membership) and len(m.members) == count, timeout)
    finally:
        watcher.close()
    assert isinstance(msg, Membership)
    return {m.info.node_id for m in msg.members}


@pytest.mark.parametrize("default_route", [False, True], ids=["no-default-route", "default-route"])
def test_nodes_on_a_lan_find_each_other_by_broadcast_and_only_their_cluster(nodes, segment, tmp_path,
                                                                            default_route):
    key = tmp_path / "cluster.key"
    curve.write_key_file(key, curve.keygen())
    namespace = f"lan-{uuid.uuid4().hex[:8]}"
    hosts = [segment.host(default_route) for _ in range(4)]
    a = start(nodes, hosts[0], "a", namespace, key)
    b = start(nodes, hosts[1], "b", namespace, key)
    assert len(members(a, 2, 30)) == 2 and len(members(b, 2, 10)) == 2
    gossip_log = (a.home / "logs" / "gossip.log").read_text()
    assert f"LAN discovery announces on {segment.prefix}.255 ({hosts[0].dev})" in gossip_log

    # On the same segment: another cluster's namespace stays out; a node without the key is seen
    # (its hellos reach a) and refused.
    other = start(nodes, hosts[2], "other", f"other-{namespace}", key)
    start(nodes, hosts[3], "keyless", namespace, None)
    wait_until(a, lambda: "refused a peer" in (a.home / "logs" / "gossip.log").read_text(), 30,
               "the keyless node's hellos refused")
    assert len(members(a, 2, 5)) == 2 and len(members(other, 1, 5)) == 1

    # A node whose interface goes down leaves the cluster, and comes back with it.
    hosts[1].link(up=False, default_route=default_route)
    assert len(members(a, 1, 15)) == 1
    hosts[1].link(up=True, default_route=default_route)
    assert len(members(a, 2, 30)) == 2

    # A client on the node's own machine is local at any of its addresses; one elsewhere is not.
    url = f"http://{hosts[0].address}:{a.api_port}/state"
    assert hosts[0].http_status(url) == 200
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 403
