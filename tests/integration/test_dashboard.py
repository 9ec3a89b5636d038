"""The dashboard in a real headless browser: Debian's Chromium driven by Playwright (never a
downloaded browser) against a real 2-node cluster with the demo model. The page loads with no
console errors and shows both nodes; a placement made from the page (its previews, with the
typed refusals shown) becomes an instance card with its two ranks; its tok/s figure moves while
streams run; the chat box streams an answer; the cross-rank timeline lists both ranks; deleting
from the page removes the instance; a refused placement shows the API's message. Screenshots
go to the test's tmp dir and, with SKULK_SCREENSHOT_DIR set, there too.

Every wait is the driver's own (`expect`, `wait_for_function`) with a deadline."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.integration.browser import browser  # noqa: F401 - the fixture
from tests.integration.cluster import FAST, converged, name_of, node_args, place_and_wait, state_of
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import Node, wait_until
from tests.integration.serving import MODEL, http_json, sse_events


def start_pair(nodes: Any, demo_model: Path, config: dict[str, Any] = FAST) -> tuple[Node, Node]:
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    a = nodes("a", config=config, args=node_args(namespace, []), models={DEMO_DIR: demo_model})
    b = nodes("b", config=config, args=node_args(namespace, [a]), models={DEMO_DIR: demo_model})
    wait_until(a, lambda: converged([a, b], 2), 30, "formation")
    return a, b


@pytest.fixture
def pair(nodes, demo_model) -> tuple[Node, Node]:
    return start_pair(nodes, demo_model)


class Streams:
    """Long greedy streams to a node, one after another on a thread, until stopped."""

    def __init__(self, node: Node) -> None:
        self.node, self.stop, self.tokens, self.errors = node, threading.Event(), 0, []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            conn = http.client.HTTPConnection("127.0.0.1", self.node.api_port, timeout=60)
            try:
                conn.request("POST", "/v1/chat/completions", json.dumps({
                    "model": MODEL, "max_tokens": 1900, "stream": True, "temperature": 0,  # greedy: no early EOS
                    "messages": [{"role": "user", "content": "Beautiful is better than ugly."}]}),
                    {"Content-Type": "application/json"})
                for kind, payload in sse_events(conn.getresponse()):
                    if self.stop.is_set() or payload == "[DONE]":
                        break
                    if kind == "data" and "error" in payload:
                        self.errors.append(payload)
                    elif kind == "data":
                        self.tokens += 1
            finally:
                conn.close()

    def __enter__(self) -> Streams:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "a stream did not end"


def screenshot(page: Page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    page.evaluate("window.scrollTo(0, 0)")  # the sticky header at the top of the picture
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("SKULK_SCREENSHOT_DIR"):
        out = Path(os.environ["SKULK_SCREENSHOT_DIR"])
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, out / name)
    assert path.stat().st_size > 10_000, "an empty screenshot"
    return path


def open_page(browser: BrowserContext) -> tuple[Page, list[str]]:  # noqa: F811
    """The profile's page, and the list its console errors and uncaught exceptions go to."""
    page = browser.pages[0] if browser.pages else browser.new_page()
    page.set_default_timeout(30_000)
    console: list[str] = []
    page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}") if msg.type == "error" else None)
    page.on("pageerror", lambda exc: console.append(f"pageerror: {exc}"))
    return page, console


def tps_of(card: Any) -> str:
    return card.get_by_test_id("tps").inner_text()


@pytest.mark.timeout(420)
def test_the_dashboard_in_a_real_browser(pair, browser, tmp_path):  # noqa: F811
    a, b = pair
    page, console = open_page(browser)

    # Loads with both nodes, their memory and disk, and nothing placed.
    page.goto(f"{a.url}/cluster")
    nodes = page.get_by_test_id("node")
    expect(nodes).to_have_count(2)
    names = [name_of(a), name_of(b)]  # given no names: the host name, and b's derived name
    assert names[0] != names[1]
    for name in names:
        card = nodes.filter(has=page.get_by_role("heading", name=name, exact=True))
        expect(card).to_have_count(1)
        expect(card.get_by_test_id("node-health")).to_have_text("ok")
        expect(card).to_contain_text("Memory")
        expect(card).to_contain_text("Disk")
        accelerator = http_json(f"{a.url}/state")[1]["nodeSystem"][http_json(f"{a.url}/node_id")[1]]["accelerator"]
        expect(card.get_by_test_id("node-accelerator")).to_contain_text(
            {"cpu": "CPU", "cuda": "CUDA", "metal": "Metal"}[accelerator["kind"]] + " · " + accelerator["name"])
    expect(page.get_by_test_id("no-instances")).to_be_visible()
    expect(page.get_by_test_id("health")).to_have_text("idle")

    # Previews, with the typed refusals shown; place Pipeline over both nodes from the page.
    page.get_by_test_id("place-model").select_option(MODEL)
    expect(page.get_by_test_id("refusal").filter(has_text="RDMA").first).to_be_visible()
    row = page.locator('[data-testid=preview][data-sharding=Pipeline][data-meta=MlxRing][data-width="2"]')
    row.get_by_test_id("place").click()
    placed = page.get_by_test_id("placed")
    expect(placed).to_be_visible()
    instance_id = placed.locator(".mono").inner_text().strip()

    card = page.locator(f'[data-testid=instance][data-instance-id="{instance_id}"]')
    expect(card.get_by_test_id("instance-status")).to_have_text("Ready", timeout=180_000)
    expect(card.get_by_test_id("rank")).to_have_count(2)
    expect(card.get_by_test_id("rank").filter(has_text="Ready")).to_have_count(2)
    for name in names:
        expect(card.get_by_test_id("rank").filter(has=page.get_by_role("cell", name=name, exact=True))).to_have_count(1)
    idle_figure = tps_of(card)
    assert idle_figure in ("0.0", "–"), idle_figure
    assert not console, console

    # The cross-rank timeline of the instance lists both ranks.
    card.get_by_test_id("show-timeline").click()
    timeline = page.get_by_test_id("timeline")
    expect(timeline.get_by_test_id("timeline-runner")).to_have_count(2)

    # tok/s moves while streams run (two different positive figures), with requests active.
    with Streams(b) as streams:
        page.wait_for_function("(id) => parseFloat(document.querySelector(`[data-instance-id='${id}'] "
                               "[data-testid=tps]`).textContent) > 0", arg=instance_id, timeout=60_000)
        first = tps_of(card)
        page.wait_for_function("([id, prev]) => { const t = document.querySelector(`[data-instance-id='${id}'] "
                               "[data-testid=tps]`).textContent; return parseFloat(t) > 0 && t !== prev; }",
                               arg=[instance_id, first], timeout=60_000)
        second = tps_of(card)
        expect(card.get_by_test_id("active")).not_to_have_text("0")
        expect(page.get_by_test_id("node-status").filter(has_text="busy").first).to_be_visible()
        expect(timeline.get_by_test_id("timeline-entry").first).to_be_visible()
        shot = screenshot(page, tmp_path, "dashboard.png")
    assert not streams.errors, streams.errors
    print(f"tok/s on the card while streaming: {first} then {second} ({streams.tokens} chunks streamed); "
          f"screenshot {shot}")

    # The chat box streams an answer from the placed model.
    page.get_by_test_id("chat-model").select_option(MODEL)
    page.get_by_test_id("chat-max-tokens").fill("24")
    page.get_by_test_id("chat-input").fill("Hello there")
    page.get_by_test_id("chat-send").click()
    expect(page.get_by_test_id("chat-stats")).to_contain_text(re.compile(r"\d+ tokens, .* [\d.]+ tok/s decoding"),
                                                            timeout=60_000)
    answer = page.get_by_test_id("chat-assistant").last.locator("pre").inner_text()
    assert answer.strip(), "the chat box shows no answer"
    assert not console, console

    # Delete from the page (a two-step button): the card goes, and so does the instance.
    card.get_by_test_id("delete").click()
    card.get_by_test_id("confirm-delete").click()
    expect(card).to_have_count(0, timeout=60_000)
    expect(page.get_by_test_id("no-instances")).to_be_visible()
    assert not (state_of(a) or {}).get("instances"), "the instance is still in the state"
    assert not console, console

    # A placement the cluster cannot make shows the API's refusal (the browser logs the 400).
    page.get_by_test_id("custom-min-nodes").fill("3")
    page.get_by_test_id("custom-place").click()
    refusal = page.locator(".place").get_by_test_id("api-error")
    expect(refusal).to_contain_text("POST /place_instance")
    expect(refusal).to_contain_text("400 Bad Request")
    expect(refusal).to_contain_text("The topology has only 2 node(s)")
    assert all("status of 400" in line for line in console) and console, console
    screenshot(page, tmp_path, "dashboard-refusal.png")

    # A node draining before an in-place restart answers `/health` 503 {"status": "draining"} (its
    # real shape: `observe/health.py`): the page shows it as the node's status, not as an error.
    draining = json.dumps({"status": "draining", "version": "t"})
    page.route("**/health", lambda route: route.fulfill(status=503, content_type="application/json", body=draining))
    expect(page.get_by_test_id("health")).to_have_text("draining")
    assert "GET /health" not in page.locator("body").inner_text()
    page.unroute("**/health")
    assert all("status of 400" in line or "status of 503" in line for line in console), console


@pytest.mark.timeout(300)
def test_a_frozen_rank_shows_as_stuck_in_the_timeline(nodes, demo_model, browser, tmp_path):  # noqa: F811
    """Rank 1 of a Pipeline x2 instance SIGSTOPped mid-stream: the page's timeline says that
    neither rank progresses (rank 0 waits for rank 1 inside the decode step)."""
    config = {**FAST, "heartbeat": {"liveness": 60}}  # the supervisor leaves the frozen runner be meanwhile
    a, b = start_pair(nodes, demo_model, config)
    instance_id, _, _ = place_and_wait(a, [a], {"model_id": MODEL, "min_nodes": 2}, timeout=180)

    page, console = open_page(browser)
    page.goto(f"{a.url}/")
    card = page.locator(f'[data-testid=instance][data-instance-id="{instance_id}"]')
    card.get_by_test_id("show-timeline").click()
    timeline = page.get_by_test_id("timeline")
    expect(timeline.get_by_test_id("timeline-runner")).to_have_count(2)

    with Streams(a):
        expect(card.get_by_test_id("active")).to_have_text("1", timeout=60_000)
        runners = http_json(f"{a.url}/v1/diagnostics/cluster/timeline")[1]["runners"]
        (frozen,) = [r["pid"] for r in runners if r["instanceId"] == instance_id and r["deviceRank"] == 1]
        os.kill(frozen, signal.SIGSTOP)
        try:
            for rank in (1, 0):
                expect(timeline.get_by_test_id("stuck-rank").filter(has_text=f"Rank {rank} on")).to_be_visible()
            screenshot(page, tmp_path, "dashboard-stuck.png")
        finally:
            os.kill(frozen, signal.SIGCONT)
        expect(timeline.get_by_test_id("stuck-rank")).to_have_count(0)  # both move again
    assert not console, console


LOGIC = """async () => {
  const {splitFrames, parseFrame, streamChat} = await import('/dashboard/sse.js');
  const {stuckReason} = await import('/dashboard/timeline.js');
  const {statusLabel, instanceViews, deletionViews} = await import('/dashboard/instances.js');
  const {acceleratorText} = await import('/dashboard/nodes.js');
  const {bytesOf, fmtBytes} = await import('/dashboard/format.js');
  const split = splitFrames(': command_id c1\\n\\ndata: {"a": 1}\\r\\n\\r\\ndata: [DO');
  let refused = null;
  try {
    await streamChat({model: 'nobody/nothing', messages: [{role: 'user', content: 'hi'}]},
                     {command() {}, delta() {}, done() {}});
  } catch (e) { refused = {what: e.what, status: e.status, type: e.type, message: e.message}; }
  const at = '2026-01-01T00:00:10Z';
  const runner = (phase, last, inPhase) => ({phase, lastProgressAt: last, secondsInPhase: inPhase, phaseDetail: null});
  return {
    frames: split.frames.map(parseFrame), rest: split.rest,
    error: parseFrame('data: {"error": {"message": "boom", "code": 500}}'),
    done: parseFrame('data: [DONE]'),
    stuck: [runner('decode_stream', '2026-01-01T00:00:09Z', 60), runner('decode_stream', '2026-01-01T00:00:01Z', 9),
            runner('decode_barrier', '2026-01-01T00:00:09.5Z', 7), runner('idle', '2026-01-01T00:00:00Z', 90),
            runner('decode_barrier', '2026-01-01T00:00:09.5Z', 1)].map((r) => stuckReason(r, at)),
    labels: [[], ['RunnerReady', 'RunnerRunning'], ['RunnerReady', 'RunnerLoading'], ['RunnerReady', 'RunnerFailed'],
             ['RunnerWarmingUp', 'RunnerReady'], ['RunnerReady', 'RunnerReady']].map(statusLabel),
    bytes: [bytesOf({inBytes: 5}), bytesOf(7), bytesOf(null), fmtBytes(3 * 1024 ** 3), fmtBytes(512 * 1024 ** 2)],
    refused,
    spec: instanceViews({instances: {i1: {MlxRingInstance: {shardAssignments: {modelId: 'm', nodeToRunner: {n1: 'r1'},
             runnerToShard: {r1: {PipelineShardMetadata: {deviceRank: 0, startLayer: 0, endLayer: 4}}}}}}},
             runners: {r1: {RunnerReady: {enginePath: 'cpu fp32', speculation: 'prompt_lookup x4, up to 1 stream'}}}},
             []).map((v) => [v.speculation, v.enginePath]),
    deletions: deletionViews({deletedInstances: {
      old: {modelId: 'm', reason: 'lost with node n2 (timed out); placing it again in 2s', cause: 'node_lost',
            deletedAt: '2026-01-01T00:00:05Z', recreateAt: '2026-01-01T00:00:07Z', replacedBy: 'new'},
      gone: {modelId: 'm', reason: 'deleted by operator', cause: 'operator', deletedAt: '2026-01-01T00:00:01Z',
             recreateAt: null, replacedBy: null}}}).map((d) => [d.id, d.cause, d.outcome]),
    accelerators: [acceleratorText({kind: 'cuda', name: 'NVIDIA H200', memory: {inBytes: 140 * 1024 ** 3}, count: 2}),
                   acceleratorText({kind: 'cpu', name: 'AMD EPYC', memory: {inBytes: 0}, count: 1})],
  };
}"""


def test_the_pages_logic_in_the_browser(nodes, browser):  # noqa: F811
    """The page's pure functions, run in Chromium from the modules the node serves: SSE frames,
    what counts as a stuck rank, status labels, byte formatting, and a refused stream's error."""
    node = nodes("solo")
    page, _console = open_page(browser)  # (the refused stream below logs its 404)
    page.goto(f"{node.url}/chat/")
    expect(page.get_by_test_id("summary")).to_be_visible()
    got = page.evaluate(LOGIC)
    assert got["frames"] == [{"comment": "command_id c1"}, {"data": {"a": 1}}] and got["rest"] == "data: [DO"
    assert got["error"] == {"data": {"error": {"message": "boom", "code": 500}}} and got["done"] == {"data": "[DONE]"}
    assert got["stuck"] == [None, "no entry for 9 s in decode_stream", "waiting in decode_barrier for 7 s", None, None]
    assert got["labels"] == ["Pending", "Running", "Loading", "Failed", "Warming Up", "Ready"]
    assert got["bytes"] == [5, 7, None, "3.0 GiB", "512 MiB"]
    assert got["spec"] == [["prompt_lookup x4, up to 1 stream", "cpu fp32"]]
    assert got["deletions"] == [["old", "node lost", "replaced by new"], ["gone", "deleted", ""]], got["deletions"]
    assert got["accelerators"] == ["CUDA · 2 x NVIDIA H200 · 140 GiB", "CPU · AMD EPYC"], got["accelerators"]
    assert got["refused"] == {"what": "POST /v1/chat/completions", "status": 404, "type": "Not Found",
                              "message": "No instance found for model nobody/nothing"}, got["refused"]
