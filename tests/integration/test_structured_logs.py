"""`logging.enabled`: every process of a real node writes JSON lines on stdout, and a request's
lines on the API and on its runner carry its command id and task id."""

from __future__ import annotations

import json
from pathlib import Path

from skulk.wire.control import AdminVerb
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import wait_until
from tests.integration.serving import MODEL, http_json, wait_model_ready

FIELDS = {"time", "level", "node", "role", "pid", "logger", "message"}


def json_lines(out: Path) -> list[dict]:
    """Every line of the node's captured stdout+stderr that is a JSON object (each must parse)."""
    lines = []
    for raw in out.read_text(errors="replace").splitlines():
        if raw.startswith("{"):
            lines.append(json.loads(raw))  # a torn or interleaved line fails here
    return lines


def test_json_lines_carry_the_fields_and_the_request_ids(nodes, demo_model):
    node = nodes(name="jsonlog", config={"logging": {"enabled": True, "ingest_url": "http://127.0.0.1:9/x"}},
                 args=("--place", MODEL), models={DEMO_DIR: demo_model})
    runner = wait_model_ready(node)
    status, body = http_json(f"{node.url}/v1/chat/completions", {
        "model": MODEL, "max_tokens": 4, "temperature": 0,
        "messages": [{"role": "user", "content": "Hello"}]})
    assert status == 200, body
    command_id = body["id"]

    def request_lines() -> list[dict]:
        return [line for line in json_lines(node.log_path) if line.get("command_id") == command_id]

    wait_until(node, lambda: {"api", runner} <= {line["role"] for line in request_lines()}, 10,
               "the request's lines from the api and the runner")  # re-checked on each bus message
    lines = json_lines(node.log_path)
    assert lines, node.log_tail()
    name = node.admin(AdminVerb.STATUS).node_name  # given no name: the host name (it is alone)
    assert name
    for line in lines:
        assert FIELDS <= set(line), line
        assert line["node"] == name and isinstance(line["pid"], int) and line["time"].endswith("Z")
    roles = {line["role"] for line in lines}
    assert {"supervisor", "bus", "master", "api", "worker", runner} <= roles, roles
    mine = request_lines()
    assert {"api", runner} <= {line["role"] for line in mine}, mine
    task_ids = {line["task_id"] for line in mine if "task_id" in line}
    assert len(task_ids) == 1, mine  # one task, on the API's lines and the runner's alike
    assert {line["role"] for line in mine if "task_id" in line} >= {"api", runner}
    # the human-readable stderr lines and per-process files stay as they were
    assert any(raw.startswith("[") for raw in node.log_path.read_text().splitlines())
    assert (node.home / "logs" / "api.log").read_text().startswith("[")
