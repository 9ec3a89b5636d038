"""The OpenAPI document against the server it describes, both ways, without sockets: the app is
built from the route table with stand-ins for the state replica and the master, so every
declared operation can be called (its answer must be a declared status with a body of the
declared shape), every route the app answers must be in the document, and every request schema
must agree with the parser that enforces it (`test_openapi_live.py` does the same on a node)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import falcon
import falcon.testing
import jsonschema
import pytest
from openapi_spec_validator import validate

from skulk.node.role_args import ChildArgs
from skulk.services.api.dialects import anthropic, completions, embeddings, models, ollama, responses
from skulk.services.api.dialects.fields import ApiError, flag
from skulk.services.api.dialects.openai_chat import CHAT_REQUEST, parse
from skulk.services.api.generate.generation import Generation
from skulk.services.api.generate.timing import StreamTiming
from skulk.services.api.http.app import build_app
from skulk.services.api.http.declare import Deps, Op, Route, RouteMismatch
from skulk.services.api.http.routes import ROUTES
from skulk.services.api.links.master_client import MasterUnavailable
from tests.unit.builders import api_args


class NoState:
    """A replica that never got a snapshot (the master is starting)."""

    members, departed, started = 0, frozenset(), time.monotonic()

    def get(self, timeout: float = 5.0) -> None:
        return None

    def wait_change(self, after_idx: int, timeout: float) -> None:
        return None


class NoMaster:
    def command(self, cmd: object, timeout: float = 0) -> Any:
        raise MasterUnavailable("no master in this test")

    def tell(self, cmd: object) -> None:
        pass


class NoRunners:
    timing = StreamTiming()

    def cancel(self, endpoint: str, request_id: str) -> None:
        pass


def deps(home: Path) -> Deps:
    model = home / "models" / "org--model"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64, "num_key_value_heads": 2,
        "max_position_embeddings": 512}))
    (model / "model.safetensors").write_bytes(b"x" * 100)
    replica, master, runners = NoState(), NoMaster(), NoRunners()
    return Deps(replica=replica, master=master, runners=runners,  # type: ignore[arg-type]
                generation=Generation(master, runners, replica, "n1"),  # type: ignore[arg-type]
                child=ChildArgs(child_id="api", title="api", home=home, run_dir=home),  # no supervisor there:
                api=api_args("n1", home), version="0.0-test")  # GET /metrics leaves its figures out


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> falcon.testing.TestClient:
    # With no state ever, a model lookup waits out the catalog's grace before its 503: 15 s of a
    # busy loop here, as `NoState` never blocks (what is asserted is the answer, not the wait).
    monkeypatch.setattr(models, "CATALOG_PENDING_S", 0.2)
    return falcon.testing.TestClient(build_app(deps(tmp_path)))


@pytest.fixture
def doc(client: falcon.testing.TestClient) -> dict[str, Any]:
    result = client.simulate_get("/api/openapi.json")
    assert result.status_code == 200
    return result.json


def check(doc: dict[str, Any], schema: dict[str, Any], instance: Any) -> None:
    """Validate against a schema of the document (its `$ref`s point into the document)."""
    jsonschema.Draft202012Validator({**schema, "components": doc["components"]}).validate(instance)


def app_routes(app: falcon.App) -> dict[str, set[str]]:
    """Every path template the app routes, with the methods a resource responder answers."""
    found: dict[str, set[str]] = {}

    def walk(nodes: list[Any]) -> None:
        for node in nodes:
            if node.resource is not None:
                found[node.uri_template] = {m for m, responder in node.method_map.items()
                                            if getattr(responder, "__self__", None) is node.resource} - {"OPTIONS"}
            walk(node.children)

    walk(app._router._roots)
    return found


def test_the_document_is_valid_openapi(doc):
    validate(doc)
    assert doc["openapi"].startswith("3.1") and doc["info"]["version"] == "0.0-test"


def test_every_route_the_app_answers_is_documented_with_its_methods(client, doc):
    documented = {path: {m.upper() for m in item} for path, item in doc["paths"].items()}
    assert app_routes(client.app) == documented
    assert documented == {path: set(route.ops) for route in ROUTES for path in route.paths}
    assert len(documented) >= 39 and "/api/openapi.json" in documented


EXAMPLES: dict[str, Any] = {
    "/v1/chat/completions": {"model": "org/model", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/tracing": {"enabled": True},
    "/v1/completions": {"model": "org/model", "prompt": "Once"},
    "/v1/responses": {"model": "org/model", "input": "hi"},
    "/v1/messages": {"model": "org/model", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/embeddings": {"model": "org/model", "input": ["hi", "there"], "encoding_format": "base64"},
    "chat": {"model": "org/model", "messages": [{"role": "user", "content": "hi"}], "stream": False},
    "generate": {"model": "org/model", "prompt": "hi"},
    "show": {"model": "org/model"},
    "/place_instance": {"model_id": "org/model"},
    "/models/add": {"path": "/no/such/file.gguf", "model_id": "org/model"},
    "/config": {},
    "/store/purge-staging": {"modelId": "org/model"},
    "/v1/traces/delete": {"taskIds": ["no-such-task"]},
    "cancel": {"taskId": "no-such-task"},  # /v1/diagnostics/{node,cluster/{node_id}}/runners/{runner_id}/cancel
}
"""A valid body per operation that takes one (Ollama's by last path segment)."""


def example(path: str) -> Any:
    for key in (path, path.replace("/bench/", "/v1/"), path.rsplit("/", 1)[1]):
        if key in EXAMPLES:
            return EXAMPLES[key]
    raise AssertionError(f"{path} takes a body: add a valid example to EXAMPLES")


def answer_matches(doc: dict[str, Any], op: dict[str, Any], result: Any, where: str) -> None:
    declared = op["responses"].get(str(result.status_code))
    assert declared is not None, f"{where} answered an undeclared {result.status_code}: {result.text[:200]}"
    content = declared.get("content", {})
    kind = (result.headers.get("content-type") or "").split(";")[0]
    if kind == "application/json" and result.text:  # (HEAD: the type, no body)
        assert kind in content, f"{where}: JSON not declared for {result.status_code}: {result.text[:200]}"
        check(doc, content[kind]["schema"], result.json)
    else:
        assert not result.text or kind in content, f"{where}: {kind!r} not declared"


def test_every_documented_operation_is_answered_as_documented(client, doc):
    for path, item in doc["paths"].items():
        url = re.sub(r"{\w+}", "some-id", path)
        for method, op in item.items():
            where = f"{method.upper()} {path}"
            result = client.simulate_request(method.upper(), url)  # no body, no state, no master
            assert result.status_code not in (404, 405) or "some-id" in url, where
            answer_matches(doc, op, result, where)
            if "requestBody" in op:
                body = example(path)
                check(doc, op["requestBody"]["content"]["application/json"]["schema"], body)
                result = client.simulate_request(method.upper(), url, json=body)
                assert result.status_code != 400, f"{where}: the example was refused: {result.text}"
                answer_matches(doc, op, result, where + " (example)")


def test_a_resource_must_answer_exactly_its_declared_methods(tmp_path):
    class PostOnly:
        def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
            pass

    with pytest.raises(RouteMismatch, match="answers \\['POST'\\] but the route declares \\['GET'\\]"):
        build_app(deps(tmp_path), (Route("/x", lambda d: PostOnly(), {"GET": Op("x")}, "meta"),))


# ---- request schemas against the parsers that enforce them --------------------------------------

class Recording(dict):  # type: ignore[type-arg]
    """A JSON object that notes every key a parser reads (as a path, lists as "*")."""

    def __init__(self, data: dict[str, Any], path: tuple[str, ...], seen: set[tuple[str, ...]]) -> None:
        super().__init__(data)
        self.path, self.seen = path, seen

    def _wrap(self, key: str, value: Any) -> Any:
        self.seen.add((*self.path, key))
        return recording(value, (*self.path, key), self.seen)

    def get(self, key: str, default: Any = None) -> Any:
        return self._wrap(key, super().get(key, default))

    def __getitem__(self, key: str) -> Any:
        return self._wrap(key, super().__getitem__(key))

    def __contains__(self, key: object) -> bool:
        self.seen.add((*self.path, str(key)))
        return super().__contains__(key)


def recording(value: Any, path: tuple[str, ...], seen: set[tuple[str, ...]]) -> Any:
    if isinstance(value, dict) and not isinstance(value, Recording):
        return Recording(value, path, seen)
    if isinstance(value, list):
        return [recording(v, (*path, "*"), seen) for v in value]
    return value


def branches(schema: dict[str, Any]) -> list[dict[str, Any]]:
    out = [schema]
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, []):
            out += branches(sub)
    if "then" in schema:
        out += branches(schema["then"])
    return out


def declared(schema: dict[str, Any], path: tuple[str, ...]) -> bool:
    if not path:
        return True
    key, rest = path[0], path[1:]
    subs = branches(schema)
    if key == "*":
        nxt = [s["items"] for s in subs if "items" in s]
    else:
        nxt = [s["properties"][key] for s in subs if key in s.get("properties", {})]
    return any(declared(n, rest) for n in nxt)


def completion_and_echo(body: Any) -> Any:
    """What `CompletionsResource` checks: the body, then `echo`."""
    return completions.parse_completion(body), flag(body, "echo")

USER = {"role": "user", "content": "hi"}
PARSERS: list[tuple[str, Callable[[Any], Any], dict[str, Any], list[dict[str, Any]]]] = [
    ("chat", parse, CHAT_REQUEST, [
        {"model": "m", "messages": [{"role": "system", "content": [{"type": "text", "text": "a"}]}, USER],
         "max_tokens": 5, "stream": False, "stop": "x", "logprobs": True, "top_logprobs": 2, "temperature": 0.5,
         "top_p": 0.5, "top_k": 5, "min_p": 0.1, "seed": 7, "enable_thinking": False, "reasoning_effort": "low",
         "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object"}}},
         "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
        {"model": "m", "max_completion_tokens": 5, "messages": [
            USER, {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "sunny"}]}]),
    ("anthropic", anthropic.parse_messages, anthropic.MESSAGES_REQUEST, [
        {"model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "be brief"}],
         "messages": [USER, {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}],
         "stop_sequences": ["x"], "stream": True, "temperature": 1, "top_p": 0.9, "top_k": 3}]),
    ("responses", responses.parse_response, responses.RESPONSE_REQUEST, [
        {"model": "m", "input": "hi", "instructions": "be brief", "max_output_tokens": 5, "stream": False,
         "temperature": 0.2, "seed": 1, "text": {"format": {"type": "json_object"}}},
        {"model": "m", "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}],
         "text": {"format": {"type": "json_schema", "name": "p", "schema": {"type": "object"}}}}]),
    ("completions", completion_and_echo, completions.COMPLETION_REQUEST, [
        {"model": "m", "prompt": "Once", "max_tokens": 5, "stream": False, "stop": ["x"], "echo": True,
         "n": 1, "best_of": 1, "top_k": 2}, {"model": "m", "prompt": ["Once"]}]),
    ("ollama chat", ollama.parse_chat, ollama.CHAT_REQUEST, [
        {"model": "m", "messages": [USER, {"role": "assistant"}], "stream": False, "format": "json",
         "options": {"num_predict": 5, "stop": ["x"], "temperature": 0.1, "top_k": 3, "seed": 2}}]),
    ("ollama generate", ollama.parse_generate, ollama.GENERATE_REQUEST, [
        {"model": "m", "prompt": "hi", "system": "be brief", "raw": False, "stream": True,
         "format": {"type": "object"}, "options": {"num_predict": -1, "min_p": 0.1}},
        {"model": "m", "prompt": "hi", "raw": True}]),
    ("embeddings", embeddings.parse, embeddings.EMBEDDING_REQUEST, [
        {"model": "m", "input": ["hi", "there"], "encoding_format": "float", "dimensions": 8, "user": "u"},
        {"model": "m", "input": "hi"}]),
]

BEYOND_THE_SCHEMA = ("no content to generate", "cannot be used")
"""Rules the schemas state in prose, not in JSON Schema: some message must have content (a
cross-field rule), and a JSON schema in `response_format` must compile."""

LENIENT: dict[tuple[str, tuple[str, ...]], Callable[[Any], bool]] = {
    ("chat", ("max_completion_tokens",)): lambda v: True,  # unread when max_tokens is given
    ("ollama chat", ("options",)): lambda v: not v,  # `options or {}`: any falsy value is "none"
    ("ollama generate", ("options",)): lambda v: not v,
    ("completions", ("n",)): lambda v: v is True,  # `n != 1`: Python's True == 1
    ("completions", ("best_of",)): lambda v: v is True,
    ("responses", ("text",)): lambda v: not isinstance(v, dict),  # a non-object `text` is ignored
    ("responses", ("text", "format")): lambda v: not isinstance(v, dict),
}
"""Bodies a parser accepts beyond its schema (never the other way round): clients may rely on
the schema, and the server is kinder than it."""

PROBES: list[Any] = ["", "x", "json", "low", "text", 0, 1, -1, 3, 2.5, True, False, None, [], ["x"],
                     [{"type": "text", "text": "x"}], {}, {"type": "text"}, {"type": "object"}]
"""Values tried in every field (no integral floats: JSON Schema counts 1.0 as an integer)."""
MISSING = object()


def accepted(parser: Callable[[Any], Any], body: Any) -> bool | None:
    """True/False; None when the refusal is a rule beyond the schema."""
    try:
        parser(body)
        return True
    except ApiError as exc:
        return None if any(text in exc.message for text in BEYOND_THE_SCHEMA) else False
    except Exception as exc:  # a crash would be a 500: a parser bug
        raise AssertionError(f"the parser crashed on {body!r}: {exc!r}") from exc


def fields(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key and list index path inside a body."""
    out: list[tuple[Any, ...]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        out.append((*path, key))
        out += fields(child, (*path, key))
    return out


def replaced(body: Any, path: tuple[Any, ...], value: Any) -> Any:
    body = json.loads(json.dumps(body))
    *parents, last = path
    target = body
    for key in parents:
        target = target[key]
    if value is MISSING:
        del target[last]
    else:
        target[last] = value
    return body


@pytest.mark.parametrize("name,parser,schema,bases", PARSERS, ids=[p[0] for p in PARSERS])
def test_request_schemas_agree_with_their_parsers(name, parser, schema, bases):
    validator = jsonschema.Draft202012Validator(schema)
    seen: set[tuple[str, ...]] = set()
    for base in bases:
        assert validator.is_valid(base) and accepted(parser, base), base
        parser(recording(base, (), seen))
        paths = fields(base) + [(key,) for key in schema["properties"] if key not in base]
        for path in paths:
            for value in [*PROBES, MISSING] if path in fields(base) else PROBES:
                body = replaced(base, path, value)
                by_parser, by_schema = accepted(parser, body), validator.is_valid(body)
                if by_parser is None or by_parser == by_schema:
                    continue
                generic = tuple("*" if isinstance(k, int) else k for k in path)
                lenient = LENIENT.get((name, generic))
                assert by_parser and lenient and lenient(value), \
                    f"{name}: {'.'.join(map(str, path))} = {value!r}: parser {by_parser}, schema {by_schema}"
    undeclared = sorted(".".join(p) for p in seen if not declared(schema, p))
    assert not undeclared, f"{name}: the parser reads fields its schema does not declare: {undeclared}"
