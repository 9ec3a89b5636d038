"""A real node serves its OpenAPI document, and answers as it says: the document validates,
every plain GET it lists is answered (never 404/405) with a body of the declared shape, and
whole generations on the demo model, the state with a placed instance and that instance match
their declared schemas (`tests/unit/test_openapi.py` covers every path and method without
sockets)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

import jsonschema
import pytest
from openapi_spec_validator import validate

from tests.integration.conftest import DEMO_DIR
from tests.integration.serving import MODEL, http_json, wait_model_ready

MESSAGES = [{"role": "user", "content": "Hello"}]
GENERATIONS: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": MODEL, "messages": MESSAGES, "max_tokens": 4},
    "/bench/chat/completions": {"model": MODEL, "messages": MESSAGES, "max_tokens": 4},
    "/v1/completions": {"model": MODEL, "prompt": "Once upon", "max_tokens": 4},
    "/v1/responses": {"model": MODEL, "input": "Hello", "max_output_tokens": 4},
    "/v1/messages": {"model": MODEL, "messages": MESSAGES, "max_tokens": 4},
    "/api/chat": {"model": MODEL, "messages": MESSAGES, "stream": False, "options": {"num_predict": 4}},
    "/api/generate": {"model": MODEL, "prompt": "Once upon", "stream": False, "options": {"num_predict": 4}},
    "/api/show": {"model": MODEL},
}


@pytest.fixture
def serving(nodes, demo_model):
    node = nodes(args=("--place", MODEL), models={DEMO_DIR: demo_model})
    wait_model_ready(node)
    return node


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.headers.get_content_type(), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get_content_type(), err.read()


def check(doc: dict[str, Any], op: dict[str, Any], status: int, body: Any, where: str) -> None:
    declared = op["responses"].get(str(status))
    assert declared is not None, f"{where} answered an undeclared {status}: {body}"
    schema = declared["content"]["application/json"]["schema"]
    jsonschema.Draft202012Validator({**schema, "components": doc["components"]}).validate(body)


def test_a_node_serves_a_valid_document_and_answers_as_it_says(serving):
    status, doc = http_json(f"{serving.url}/api/openapi.json")
    assert status == 200
    validate(doc)
    paths = doc["paths"]
    for path, item in paths.items():
        if "get" not in item or "{" in path:
            continue
        status, kind, raw = get(serving.url + path)
        assert status not in (404, 405), f"GET {path}: {status}"
        if kind == "application/json":
            check(doc, item["get"], status, json.loads(raw), f"GET {path}")
    for path, body in GENERATIONS.items():
        status, answer = http_json(serving.url + path, body, timeout=60)
        assert status == 200, f"POST {path}: {status} {answer}"
        check(doc, paths[path]["post"], status, answer, f"POST {path}")
    _status, state = http_json(f"{serving.url}/state")
    instance_id = next(iter(state["instances"]))
    status, instance = http_json(f"{serving.url}/instance/{instance_id}")
    check(doc, paths["/instance/{instance_id}"]["get"], status, instance, "GET /instance/{id}")
    status, previews = http_json(f"{serving.url}/instance/previews?model_id={quote(MODEL)}")
    check(doc, paths["/instance/previews"]["get"], status, previews, "GET /instance/previews")
    assert status == 200 and previews["previews"]
