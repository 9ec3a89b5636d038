"""Property-based fuzzing of every route of a real node's OpenAPI document with schemathesis
(tools/fuzz_http.py): bodies and parameters that fit the schemas and that violate them, plus
non-JSON, deeply nested and huge bodies and path traversal. Pass: no 5xx outside the error
envelope, no dropped connection or hung request, no role crashed or restarted, memory bounded,
and a normal chat completion afterwards. `SKULK_FUZZ_SECONDS=600` runs it deeply."""

from __future__ import annotations

import http.client
import os
import random

import pytest

from tests.integration.conftest import DEMO_DIR
from tests.integration.serving import MODEL, http_json, wait_model_ready
from tools.fuzz_checks import NodeProbe, problems
from tools.fuzz_http import fuzz_http

SECONDS = float(os.environ.get("SKULK_FUZZ_SECONDS", "10"))  # after a first round over every route


@pytest.mark.timeout(SECONDS + 420)  # one whole round over every route comes first, whatever SECONDS is
def test_every_route_survives_schema_fuzzing(nodes, demo_model):
    node = nodes(args=("--place", MODEL), models={DEMO_DIR: demo_model})
    wait_model_ready(node)
    probe = NodeProbe(node.home, node.url, node.pid)
    assert probe.serves() == ""
    before = probe.snapshot()
    seed = random.randrange(2**32)
    print(f"http fuzz seed {seed}")
    counts = fuzz_http(node.url, SECONDS, seed)
    print(f"requests {counts.total()} over {len(counts.requests)} operations, statuses {dict(counts.statuses)}")
    for line in counts.internal:
        print("500 (in the envelope):", line)
    status, doc = http_json(f"{node.url}/api/openapi.json")
    routes = {f"{m.upper()} {p}" for p, ops in doc["paths"].items() for m in ops}
    assert status == 200 and routes <= set(counts.requests), routes - set(counts.requests)
    assert counts.failures == [], "\n".join(counts.failures[:20])
    assert probe.serves() == ""
    assert problems(before, probe.snapshot(), SECONDS) == [], node.log_tail()


def test_a_body_left_unread_does_not_cost_the_connection(nodes):
    """Regression: a GET sent with a body over 64 KiB got `Connection: keep-alive`, and then
    gunicorn closed the connection, so the client's next request on it failed."""
    node = nodes()
    conn = http.client.HTTPConnection("127.0.0.1", node.api_port, timeout=30)
    for size in (100, 70_000, 1_000_000):
        conn.request("GET", "/node_id", body=b"x" * size, headers={"Content-Type": "application/json"})
        first = conn.getresponse()
        first.read()
        assert first.status == 200 and first.getheader("Connection") == "keep-alive"
        conn.request("GET", "/node_id")  # the same connection
        second = conn.getresponse()
        assert second.status == 200, size
        second.read()
    conn.close()
