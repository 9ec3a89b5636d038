"""A node whose cluster protocol this node cannot read is refused with both versions named, and
never half-joined."""

from __future__ import annotations

import zmq

from tests.integration.harness import wait_until
from tests.integration.serving import http_json
from tests.unit.test_version_skew import newer_hello


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
