"""API keys and scopes on real nodes: an inference key can chat (OpenAI and Anthropic SDKs, the
latter sending `x-api-key`) and list models but cannot place, restart or read the state; an
admin key can; no key or a wrong one is a 401 in each client's error shape; `/health` and the
dashboard page stay open. A node listening on every address without keys refuses admin routes
to a client on another machine (a network namespace of its own here; it serves it inference),
serves them to this machine's clients at any of its addresses, and `api.open_admin: true` lifts
the refusal. No key's text ever
appears in a log file, the event log, a trace, `/config`, `/events` or any answer. In a real
browser, the dashboard of a keyed node shows the 401 until the user types a key, then the
cluster, and the 401 again once the key is forgotten."""

from __future__ import annotations

import hashlib
import http.client
import json
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.integration import netns
from tests.integration.browser import CHROMIUM, FLAGS
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import Node, wait_until
from tests.integration.serving import MODEL

ADMIN_KEY = "sk-admin-" + uuid.uuid4().hex
INFERENCE_KEY = "sk-infer-" + uuid.uuid4().hex
WRONG_KEY = "sk-wrong-" + uuid.uuid4().hex
SECRETS = (ADMIN_KEY, INFERENCE_KEY, WRONG_KEY)
KEYS = {"api": {"keys": [
    {"name": "ops", "scope": "admin", "key_sha256": hashlib.sha256(ADMIN_KEY.encode()).hexdigest()},
    {"name": "app", "scope": "inference", "key": INFERENCE_KEY}]},  # plaintext: accepted, warned about
    "tracing": {"enabled": True}}  # traces are written: they must not hold a key either
ALONE = {"cluster": {"discovery_port": 0, "namespace": "auth-" + uuid.uuid4().hex[:8]},
         "children": {"ready_timeout_s": 60}}
"""A node on every address must not find (or be found by) other tests' nodes; its roles may take
their time to boot on a loaded machine (the restart boots every one again)."""


class Client:
    """Raw HTTP to a node from a chosen source address, recording every answer's text."""

    def __init__(self, node: Node, host: str = "127.0.0.1", source: str | None = None) -> None:
        self.node, self.host, self.source = node, host, source
        self.seen: list[str] = []

    def call(self, method: str, path: str, body: Any = None, key: str | None = None,
             header: str = "Authorization") -> tuple[int, Any, dict[str, str]]:
        conn = http.client.HTTPConnection(self.host, self.node.api_port, timeout=60,
                                          source_address=(self.source, 0) if self.source else None)
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers[header] = f"Bearer {key}" if header == "Authorization" else key
        try:
            conn.request(method, path, None if body is None else json.dumps(body), headers)
            resp = conn.getresponse()
            text = resp.read().decode(errors="replace")
            self.seen.append(text + json.dumps(dict(resp.getheaders())))
            try:
                parsed = json.loads(text) if text else None
            except ValueError:
                parsed = text
            return resp.status, parsed, {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()


def chat(n: int = 3, stream: bool = False) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": n, "temperature": 0, "stream": stream,
            "messages": [{"role": "user", "content": "Who goes there?"}]}


def assert_no_secret_anywhere(node: Node, answers: list[str]) -> None:
    """No key in any answer, nor in any file the node wrote (logs, event log, traces, run dir):
    everything under its home but the config file the keys were given in."""
    for text in answers:
        for secret in SECRETS:
            assert secret not in text, "a key appeared in an answer"
    checked = 0
    for path in [node.log_path, *node.home.rglob("*")]:
        if not path.is_file() or path.is_symlink() or path.name == "skulk.yaml":
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue  # a socket or a file removed meanwhile
        checked += 1
        for secret in SECRETS:
            assert secret.encode() not in data, f"a key appeared in {path}"
    assert checked > 5


def test_keys_and_their_scopes(nodes, demo_model):
    node = nodes(config={**KEYS, **ALONE}, args=("--place", MODEL), models={DEMO_DIR: demo_model})
    c = Client(node)
    assert c.call("GET", "/health")[0] == 200  # always open
    assert c.call("GET", "/")[0] == 200  # the dashboard page is public; what it calls is not
    status, body, headers = c.call("GET", "/v1/models")
    assert status == 401 and body["error"]["code"] == 401 and "Authorization: Bearer" in body["error"]["message"]
    assert headers["www-authenticate"].startswith("Bearer")
    status, body, _ = c.call("POST", "/v1/messages", {"model": MODEL, "max_tokens": 2, "messages": []})
    assert status == 401 and body["type"] == "error" and body["error"]["type"] == "authentication_error"
    status, body, _ = c.call("GET", "/api/tags")
    assert status == 401 and isinstance(body["error"], str)  # Ollama's shape
    assert c.call("GET", "/v1/models", key=WRONG_KEY)[0] == 401
    assert c.call("GET", "/v1/models", key=WRONG_KEY, header="x-api-key")[0] == 401
    assert c.call("GET", "/state")[0] == 401 and c.call("POST", "/admin/restart")[0] == 401

    # inference: list models, chat; never place, restart, read the state or the config
    assert c.call("GET", "/v1/models", key=INFERENCE_KEY)[0] == 200
    assert c.call("GET", "/v1/models", key=INFERENCE_KEY, header="x-api-key")[0] == 200
    for method, path, body in (("POST", "/place_instance", {"model_id": MODEL}), ("POST", "/admin/restart", None),
                               ("GET", "/state", None), ("GET", "/config", None), ("GET", "/events", None),
                               ("PUT", "/v1/tracing", {"enabled": False})):
        status, answer, _ = c.call(method, path, body, key=INFERENCE_KEY)
        assert status == 403 and "scope inference" in answer["error"]["message"], (path, answer)
    status, state, _ = c.call("GET", "/state", key=ADMIN_KEY)
    assert status == 200
    assert _wait_ready_runner(node, c)  # (serving.wait_model_ready reads /state without a key)
    status, answer, _ = c.call("POST", "/v1/chat/completions", chat(), key=INFERENCE_KEY)
    assert status == 200 and answer["usage"]["completion_tokens"] == 3
    sdk = openai.OpenAI(base_url=f"{node.url}/v1", api_key=INFERENCE_KEY)
    streamed = list(sdk.chat.completions.create(**chat(4, stream=True)))
    assert "".join(ch.choices[0].delta.content or "" for ch in streamed if ch.choices)
    with_x_api_key = anthropic.Anthropic(base_url=node.url, api_key=INFERENCE_KEY)
    msg = with_x_api_key.messages.create(model=MODEL, max_tokens=3, extra_body={"temperature": 0},
                                         messages=[{"role": "user", "content": "hi"}])
    assert msg.usage.output_tokens >= 1
    try:
        openai.OpenAI(base_url=f"{node.url}/v1", api_key=WRONG_KEY).models.list()
        raise AssertionError("a wrong key was accepted")
    except openai.AuthenticationError:
        pass

    # admin: everything, and the config never shows a key
    status, config, _ = c.call("GET", "/config", key=ADMIN_KEY)
    assert status == 200 and config["config"]["api"] == {} and config["config"]["tracing"] == {"enabled": True}
    assert c.call("GET", "/events", key=ADMIN_KEY)[0] == 200
    assert c.call("GET", "/v1/traces", key=ADMIN_KEY)[0] == 200
    assert c.call("GET", "/metrics", key=ADMIN_KEY)[0] == 200
    status, placed, _ = c.call("POST", "/place_instance", {"model_id": MODEL}, key=ADMIN_KEY)
    assert status == 200, placed
    old_api = node.status()["api"].pid
    status, restarting, _ = c.call("POST", "/admin/restart", key=ADMIN_KEY)
    assert status == 200, restarting

    wait_until(node, lambda: node.back_in_place(old_api), 60, "the node back in place")
    assert c.call("GET", "/state")[0] == 401 and c.call("GET", "/state", key=ADMIN_KEY)[0] == 200
    assert c.call("GET", "/health")[0] == 200

    log = node.log_path.read_text()
    assert "1 key(s) stored in plaintext (app)" in log and "THE API IS OPEN" not in log
    assert_no_secret_anywhere(node, c.seen)


def _wait_ready_runner(node: Node, c: Client) -> str:
    def ready() -> str | None:
        status, state, _ = c.call("GET", "/state", key=ADMIN_KEY)
        runners = state.get("runners", {}) if status == 200 else {}
        return next((r for r, st in runners.items() if "RunnerReady" in st or "RunnerRunning" in st), None)

    return wait_until(node, ready, 60, "a ready runner")


NO_NETNS = netns.unavailable()
needs_another_machine = pytest.mark.skipif(
    NO_NETNS is not None, reason=f"a remote client needs another network namespace here: {NO_NETNS}")


@pytest.fixture
def lan_host() -> Iterator[netns.Host]:
    """A host of its own on a LAN segment: a node there sees this test's process as a client on
    another machine (the segment's bridge address), which it is."""
    segment = netns.Segment()
    try:
        yield segment.host(default_route=False)
    finally:
        segment.close()


def on_host(nodes, host: netns.Host, config: dict[str, Any]) -> Node:
    return nodes(config=config, args=("--listen", "0.0.0.0"),
                 command=host.command(sys.executable, "-m", "skulk.scripts.cli"))


@needs_another_machine
def test_no_keys_on_every_address_keeps_admin_routes_to_this_machine(nodes, lan_host):
    node = on_host(nodes, lan_host, ALONE)
    remote = Client(node, host=lan_host.address)
    status, body, _ = remote.call("GET", "/state")
    assert status == 403
    message = body["error"]["message"]
    assert "api.keys" in message and "api.open_admin: true" in message
    assert remote.call("POST", "/admin/restart")[0] == 403
    assert remote.call("PUT", "/config", {})[0] == 403
    assert remote.call("GET", "/v1/models")[0] == 200  # inference stays open
    assert remote.call("GET", "/health")[0] == 200
    for here in ("127.0.0.1", lan_host.address):  # this machine's clients, at any of its addresses
        assert lan_host.http_status(f"http://{here}:{node.api_port}/state") == 200
        assert lan_host.http_status(f"http://{here}:{node.api_port}/config") == 200
    log = node.log_path.read_text()
    assert log.count("THE API IS OPEN") == 1 and "admin routes answer only this machine's clients" in log


@needs_another_machine
def test_open_admin_opens_admin_routes_to_everyone(nodes, lan_host):
    node = on_host(nodes, lan_host, {**ALONE, "api": {"open_admin": True}})
    remote = Client(node, host=lan_host.address)
    assert remote.call("GET", "/state")[0] == 200
    assert remote.call("GET", "/config")[0] == 200
    assert "AND administer the cluster" in node.log_path.read_text()


def test_a_loopback_node_without_keys_serves_as_before(nodes):
    node = nodes()
    c = Client(node)
    assert c.call("GET", "/state")[0] == 200 and c.call("GET", "/config")[0] == 200
    assert "THE API IS OPEN" not in node.log_path.read_text()


def test_the_dashboard_sends_the_key_the_user_types(nodes, tmp_path):
    node = nodes(config={**KEYS, **ALONE})
    expect.set_options(timeout=30_000)
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=CHROMIUM,
                                                        headless=True, args=FLAGS)
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.goto(f"{node.url}/")
            expect(page.get_by_test_id("api-error").first).to_contain_text("401")
            page.get_by_label("API key").fill(ADMIN_KEY)
            page.get_by_role("button", name="Use key").click()
            expect(page.get_by_test_id("summary")).to_contain_text("1 node(s)")
            expect(page.get_by_test_id("api-error")).to_have_count(0)
            assert page.evaluate("sessionStorage.getItem('skulk.apiKey')") == ADMIN_KEY
            assert page.evaluate("localStorage.length") == 0 and not context.cookies()
            page.get_by_role("button", name="Forget key").click()
            expect(page.get_by_test_id("api-error").first).to_contain_text("401")
            assert page.evaluate("sessionStorage.getItem('skulk.apiKey')") is None
        finally:
            context.close()
