"""`GET /metrics` on real nodes. Serving the demo model with two API workers: the scrape parses
with Prometheus's own parser, and across known requests (completed in two client shapes, one
refused, one cancelled) its counters and histograms move by exactly the right amounts, merged
over both gunicorn workers; the worker's runner gauges follow the runner's batch. Without a
model: killed processes show as restarts per role, and their counts outlive them; a full disk
shows as the event log counting only."""

from __future__ import annotations

import http.client
import json
import os
import signal
import urllib.request
from collections import Counter
from typing import Any

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from skulk.supervisor.child import metrics_dir
from skulk.wire import endpoints
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import Node, wait_until
from tests.integration.serving import MODEL, http_json, sse_events, wait_model_ready

PROMPT = "Beautiful is better than ugly."
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(node: Node) -> Samples:
    with urllib.request.urlopen(f"{node.url}/metrics", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def get(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of `name` carrying at least `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


@pytest.fixture
def serving(nodes, demo_model):
    node = nodes(args=("--place", MODEL), models={DEMO_DIR: demo_model}, config={"api": {"workers": 2}})
    node.runner_id = wait_model_ready(node)  # type: ignore[attr-defined]
    return node


def chat(node: Node, **body: Any) -> tuple[int, Any]:
    return http_json(f"{node.url}/v1/chat/completions", {
        "model": MODEL, "temperature": 0, "messages": [{"role": "user", "content": PROMPT}], **body})


def streamed_tokens(node: Node) -> tuple[int, str]:
    """One streamed chat completion: its token frames and its finish reason."""
    conn = http.client.HTTPConnection("127.0.0.1", node.api_port, timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": MODEL, "max_tokens": 5, "temperature": 0, "stream": True,
        "messages": [{"role": "user", "content": PROMPT}]}), {"Content-Type": "application/json"})
    frames = [p for kind, p in sse_events(conn.getresponse()) if kind == "data" and p != "[DONE]"]
    conn.close()
    finish = frames[-1]["choices"][0]["finish_reason"]
    return frames[-1]["usage"]["completion_tokens"], finish


def test_counters_and_histograms_move_by_exactly_the_requests_sent(serving):
    node, rid = serving, serving.runner_id
    before = scrape(node)
    assert get(before, "skulk_node_healthy") == 1
    assert get(before, "skulk_role_restarts_total", role="api") == 0
    assert get(before, "skulk_processes", role="runner", state="running") == 1
    assert get(before, "skulk_eventlog_counting_only") == 0
    assert get(before, "skulk_staging_bytes") == 0  # no model store: nothing staged
    runner = {"runner_id": rid, "model": MODEL}
    assert total(before, "skulk_runner_state", **runner, state="RunnerReady") == 1
    assert total(before, "skulk_runner_batch_size", **runner) == 0

    # Completed: three non-streamed chats, one streamed chat, one legacy completion.
    finishes: Counter[tuple[str, str]] = Counter()
    tokens = 0
    for n in (3, 4, 6):
        status, body = chat(node, max_tokens=n)
        assert status == 200, body
        finishes["openai_chat", body["choices"][0]["finish_reason"]] += 1
        tokens += body["usage"]["completion_tokens"]
    got, finish = streamed_tokens(node)
    finishes["openai_chat", finish] += 1
    tokens += got
    status, body = http_json(f"{node.url}/v1/completions", {"model": MODEL, "prompt": PROMPT, "max_tokens": 4})
    assert status == 200, body
    finishes["openai_completions", body["choices"][0]["finish_reason"]] += 1
    tokens += body["usage"]["completion_tokens"]
    completed = sum(finishes.values())
    # Refused: no instance of that model.
    assert chat(node, model="nobody/nothing")[0] == 404
    # Cancelled mid-stream by `POST /v1/cancel/{id}`, while the runner gauges show its batch.
    cancelled_tokens = cancel_a_stream(node, runner)

    def settled() -> Samples | None:  # a stream's count lands when the API closes it
        now = scrape(node)
        ended = total(now, "skulk_requests_total") - total(before, "skulk_requests_total")
        return now if ended >= completed + 2 else None

    after = wait_until(node, settled, 30, "every request counted")

    def moved(name: str, **labels: str) -> float:
        return get(after, name, **labels) - get(before, name, **labels)

    for (api, reason), count in finishes.items():
        assert moved("skulk_requests_total", api=api, outcome="completed", reason=reason) == count
    assert moved("skulk_requests_total", api="openai_chat", outcome="refused", reason="no_instance") == 1
    assert moved("skulk_requests_total", api="openai_chat", outcome="cancelled", reason="cancelled") == 1
    assert total(after, "skulk_requests_total") - total(before, "skulk_requests_total") == completed + 2
    assert total(after, "skulk_generated_tokens_total") - total(before, "skulk_generated_tokens_total") == \
        tokens + cancelled_tokens
    streams = completed + 1  # every stream with a token (the refused request had none)
    ttft = total(after, "skulk_time_to_first_token_seconds_count", model=MODEL) - \
        total(before, "skulk_time_to_first_token_seconds_count", model=MODEL)
    assert ttft == streams
    gaps = total(after, "skulk_inter_token_latency_seconds_count", model=MODEL) - \
        total(before, "skulk_inter_token_latency_seconds_count", model=MODEL)
    assert gaps == tokens + cancelled_tokens - streams
    assert total(after, "skulk_requests_in_flight") == 0

    def runner_counted() -> bool:  # from its reports (every change of its batch, every 2 s)
        generated = total(scrape(node), "skulk_runner_generated_tokens_total", **runner) - \
            total(before, "skulk_runner_generated_tokens_total", **runner)
        return generated >= tokens + cancelled_tokens  # a cancelled row may run a step past its cancel

    wait_until(node, runner_counted, 30, "the runner's tokens counted from its reports")


def cancel_a_stream(node: Node, runner: dict[str, str]) -> int:
    """Start a long greedy stream, see the runner's batch hold it, cancel it; the token frames
    the client got."""
    conn = http.client.HTTPConnection("127.0.0.1", node.api_port, timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": MODEL, "max_tokens": 1900, "temperature": 0, "stream": True,  # greedy: no early EOS
        "messages": [{"role": "user", "content": PROMPT}]}), {"Content-Type": "application/json"})
    events = sse_events(conn.getresponse())
    command_id, tokens = "", 0
    for kind, payload in events:
        if kind == "comment" and payload.startswith("command_id "):
            command_id = payload.split()[1]
        if kind == "data" and "choices" in payload:
            tokens += 1
            break
    assert command_id and tokens == 1

    def batch_of_one() -> Samples | None:
        now = scrape(node)
        return now if total(now, "skulk_runner_batch_size", **runner) == 1 else None

    busy = wait_until(node, batch_of_one, 30, "the runner's batch holding the stream")
    assert get(busy, "skulk_node_busy") == 1
    assert total(busy, "skulk_requests_in_flight", api="openai_chat") == 1
    wait_until(node, lambda: http_json(f"{node.url}/v1/cancel/{command_id}", method="POST")[0] == 200, 30,
               "the cancel accepted")
    error = None
    for kind, payload in events:
        if kind == "data" and payload != "[DONE]":
            if "choices" in payload:
                tokens += 1
            else:
                error = payload["error"]
    conn.close()
    assert error is not None and error["code"] == 499, error
    return tokens


def test_restarts_per_role_and_counters_that_outlive_their_process(nodes):
    """A killed role shows as a restart; a killed API worker's counts stay and its live gauge
    file goes (gunicorn's `child_exit` hook), with no model placed."""
    node = nodes(config={"api": {"workers": 2}})
    metrics_files = metrics_dir(endpoints.run_dir(node.home.resolve()))
    for _ in range(8):  # spread over both workers by the kernel: each one's counters in its own file
        assert chat(node, model="nobody/nothing")[0] == 404
    refused = dict(api="openai_chat", outcome="refused", reason="no_instance")
    assert get(scrape(node), "skulk_requests_total", **refused) == 8
    api = psutil.Process(node.status()["api"].pid)
    workers = {p.pid for p in api.children()}
    live_files = {p for p in workers if (metrics_files / f"gauge_livesum_{p}.db").exists()}
    assert live_files, sorted(f.name for f in metrics_files.iterdir())
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    os.kill(node.status()["eventlog"].pid, signal.SIGKILL)
    node.wait_ready("eventlog", min_restarts=1)
    wait_until(node, lambda: not any((metrics_files / f"gauge_livesum_{p}.db").exists() for p in live_files),
               30, "the dead workers' live gauges forgotten")
    wait_until(node, lambda: len(set(c.pid for c in api.children()) - workers) == 2, 30, "two new API workers")
    after = scrape(node)
    assert get(after, "skulk_requests_total", **refused) == 8  # the dead workers' counts stay
    assert total(after, "skulk_requests_in_flight") == 0
    assert get(after, "skulk_role_restarts_total", role="eventlog") == 1
    assert get(after, "skulk_role_restarts_total", role="api") == 0  # gunicorn replaced its workers itself
    assert get(after, "skulk_node_healthy") == 1


def test_the_event_log_counting_only_shows(nodes):
    """The floor set above any disk's free space: the eventlog's first check turns it counting-only."""
    node = nodes(config={"event_log": {"floor_gb": 1e9, "floor_check_every": 1}})
    wait_until(node, lambda: get(scrape(node), "skulk_eventlog_counting_only") == 1, 20,
               "the counting-only gauge")
