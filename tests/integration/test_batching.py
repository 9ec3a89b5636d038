"""Continuous batching on one real node with the demo model: concurrent requests get the
tokens they would get alone, cancels and refusals touch nobody else, seeds repeat, the
prefix cache is used and changes nothing, and a flood gets answers or 503s, never a hang."""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest

from tests.integration.batch_clients import all_at_once, body, compare, complete, max_logprob_gap, prompt, tokens_of
from tests.integration.conftest import DEMO_DIR
from tests.integration.patience import patience
from tests.integration.serving import MODEL, abandon_after, http_json, sse_events, wait_model_ready
from tools.stream_load import StreamLoad, chat_body, summary

LOGPROB_TOL = 2e-3
BLOCKED = {"SKULK_CPU_BLOCKED_MATMUL": "1"}
"""Decode matmuls in row blocks (`cpu_linear`) even on the tiny demo model, which times faster
with sgemm, where this CPU computes them exactly: batching must not change a request's tokens on
that path either. Where it does not, the runner keeps sgemm (and the tests check that path)."""


def batching_node(start, demo_model):
    node = start(args=("--place", MODEL), models={DEMO_DIR: demo_model}, env=BLOCKED,
                 config={"runner": {"max_batch": 8, "queue_max": 16}})
    wait_model_ready(node)
    line = next(ln for ln in node.log_path.read_text().splitlines() if "decode matmuls:" in ln)
    assert "row blocks (forced: exact on this CPU" in line or "sgemm (not exact on this CPU:" in line, line
    print(f"path checked: {line[line.index('decode matmuls:'):]}")
    return node


@pytest.fixture(scope="module")
def serving(module_nodes, demo_model):
    """One node for the file's tests that leave it as it was (no cache state asserted)."""
    return batching_node(module_nodes, demo_model)


@pytest.fixture
def fresh(nodes, demo_model):
    """A node of the test's own: an empty prefix cache."""
    return batching_node(nodes, demo_model)


def test_eight_concurrent_greedy_requests_match_each_sent_alone(serving):
    payloads = [body(prompt(i), 24) for i in range(8)]
    alone = []
    for p in payloads:
        status, reply = complete(serving.url, p)
        assert status == 200, reply
        alone.append(tokens_of(reply))
    t0 = time.monotonic()
    together = all_at_once(serving.url, payloads)
    print(f"8 concurrent requests: {time.monotonic() - t0:.2f}s")
    gaps = []
    for i, (status, reply) in enumerate(together):
        assert status == 200, reply
        got = tokens_of(reply)
        assert compare(alone[i], got, LOGPROB_TOL) == "", (i, compare(alone[i], got, LOGPROB_TOL))
        gaps.append(max_logprob_gap(alone[i], got))
    print(f"tokens identical; largest logprob difference batched vs alone: {max(gaps):.2e}")


def test_a_cancelled_request_leaves_the_others_tokens_unchanged(serving):
    payloads = [body(prompt(10 + i), 32) for i in range(3)]
    alone = [tokens_of(complete(serving.url, p)[1]) for p in payloads]
    results: list = [None] * 3

    def run(i: int) -> None:
        results[i] = complete(serving.url, payloads[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    conn = http.client.HTTPConnection("127.0.0.1", serving.api_port, timeout=30)
    abandon_after(conn, "/v1/chat/completions", chat_body(MODEL, prompt(99), 1500), 3)  # its row leaves the batch
    for t in threads:
        t.join(patience(60))
    for i, (status, reply) in enumerate(results):
        assert status == 200, reply
        assert compare(alone[i], tokens_of(reply), LOGPROB_TOL) == ""


def test_a_seeded_sampled_request_repeats_exactly(serving):
    seeded = body(prompt(20), 16, temperature=0.9, seed=42, logprobs=False)
    first = complete(serving.url, seeded)[1]["choices"][0]["message"]["content"]
    others = [body(prompt(21 + i), 16, temperature=0.9, logprobs=False) for i in range(3)]
    replies = all_at_once(serving.url, [seeded, *others])  # this time inside a batch
    assert replies[0][0] == 200
    assert replies[0][1]["choices"][0]["message"]["content"] == first
    other_seed = complete(serving.url, {**seeded, "seed": 43})[1]["choices"][0]["message"]["content"]
    assert other_seed != first
    # Any int64 seed and any top_k are served (a top_k beyond the vocabulary filters nothing);
    # a seed beyond int64 is the client's error.
    assert complete(serving.url, {**seeded, "seed": -1, "top_k": 10**6})[0] == 200
    status, reply = complete(serving.url, {**seeded, "seed": 2**70})
    assert status == 400 and "seed" in reply["error"]["message"]


def test_a_repeated_system_prompt_is_reused_and_changes_nothing(fresh, nodes, demo_model):
    serving = fresh
    system = {"role": "system", "content": " ".join(prompt(i) for i in range(30, 36))}

    def ask(node, question: str) -> dict:
        status, reply = complete(node.url, {**body("", 16),
                                            "messages": [system, {"role": "user", "content": question}]})
        assert status == 200, reply
        return reply

    first = ask(serving, "simple is better")
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    warm = ask(serving, "flat is better than nested")  # shares the system prompt only
    cached, total = warm["usage"]["prompt_tokens_details"]["cached_tokens"], warm["usage"]["prompt_tokens"]
    print(f"prompt {total} tokens, {cached} reused from the prefix cache")
    assert 20 < cached < total
    uncached = nodes("nocache", args=("--place", MODEL), models={DEMO_DIR: demo_model}, env=BLOCKED,
                     config={"runner": {"prefix_cache_mb": 0}})
    wait_model_ready(uncached)
    cold = ask(uncached, "flat is better than nested")
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    difference = compare(tokens_of(cold), tokens_of(warm), LOGPROB_TOL)
    assert difference == "", difference
    print(f"same tokens with and without the cache; largest logprob difference "
          f"{max_logprob_gap(tokens_of(cold), tokens_of(warm)):.2e}")


def test_64_concurrent_clients_get_their_answer_or_a_503_and_none_hangs(serving):
    bodies = [chat_body(MODEL, prompt(i), 24, stream=i % 2 == 0) for i in range(64)]
    load = StreamLoad("127.0.0.1", serving.api_port, bodies, read_timeout=60).start()
    outcomes = load.join(patience(90))
    print(summary(outcomes))
    assert not any(o.hung for o in outcomes)
    answered = [o for o in outcomes if o.status == 200 and o.done and not o.error]
    refused = [o for o in outcomes if o.status == 503]
    assert len(answered) + len(refused) == 64, summary(outcomes)
    assert all("busy" in (o.error or "") for o in refused)
    assert len(answered) >= 8
    print(f"64 clients: {len(answered)} answered, {len(refused)} got the 503 to retry")


def test_a_prompt_beyond_the_context_is_refused_at_once_while_a_stream_flows(serving):
    conn = http.client.HTTPConnection("127.0.0.1", serving.api_port, timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps(chat_body(MODEL, prompt(40), 600)),
                 {"Content-Type": "application/json"})
    events = sse_events(conn.getresponse())
    before = after = 0
    refused_in = None
    for kind, payload in events:
        if kind != "data" or not isinstance(payload, dict) or not payload.get("choices"):
            continue
        if refused_in is None:
            before += 1
            if before == 5:
                t0 = time.monotonic()
                status, reply = complete(serving.url, body("x" * 3_000_000, 8))
                refused_in = time.monotonic() - t0
                assert status == 400, reply
                assert reply["error"]["message"].startswith("context_length_exceeded:")
        else:
            after += 1
    print(f"3,000,000-character prompt refused in {refused_in:.3f}s; the stream went on for {after} tokens")
    assert after > 0


def state_events(node, kind: str) -> int:
    """How many indexed events of `kind` the node's event log holds (written behind the bus)."""
    from skulk.node.eventlog_files import read_records
    from skulk.wire.topics import STATE_EVENTS

    return sum(t.startswith(STATE_EVENTS + kind.encode())
               for _, t, _ in read_records(node.home / "eventlog" / "events.log"))


def test_busy_and_idle_are_not_events(serving):
    """Request load is not replicated state: requests add their task events and nothing else."""
    from tests.integration.harness import wait_until

    # The shared node is quiet first: every task of the file's earlier tests recorded and gone.
    wait_until(serving, lambda: http_json(f"{serving.url}/state")[1]["tasks"] == {}, 20, "no task left")
    runner_events = state_events(serving, "runner_status_updated")
    deleted = state_events(serving, "task_deleted")
    all_at_once(serving.url, [body(prompt(i), 8) for i in range(4)])
    for i in range(4):
        assert complete(serving.url, body(prompt(50 + i), 4))[0] == 200
    wait_until(serving, lambda: state_events(serving, "task_deleted") >= deleted + 8, 20, "the tasks recorded")
    assert state_events(serving, "runner_status_updated") == runner_events


def test_the_api_holds_64_streams_at_once(nodes, demo_model):
    """64 clients stream at the same time on one node (one batch of 64): none waits for a free
    API thread or a batch slot."""
    node = nodes(args=("--place", MODEL), models={DEMO_DIR: demo_model},
                 config={"runner": {"max_batch": 64, "queue_max": 0}})
    wait_model_ready(node)
    bodies = [chat_body(MODEL, prompt(i), 300) for i in range(64)]
    load = StreamLoad("127.0.0.1", node.api_port, bodies, read_timeout=60).start()
    together = load.wait_for(lambda outs: all(o.tokens > 0 and not o.done for o in outs), patience(60))
    outcomes = load.join(patience(120))
    assert together, "the 64 streams were never all producing at once\n" + summary(outcomes)
    assert all(o.done and not o.error and o.finish_reason in ("length", "stop") for o in outcomes), summary(outcomes)


def test_top_logprobs_inside_a_batch_are_each_requests_own(serving):
    payloads = [body(prompt(70 + i), 6, top_logprobs=3) for i in range(3)] + [body(prompt(80), 6, logprobs=False)]
    replies = all_at_once(serving.url, payloads)
    for status, reply in replies[:3]:
        assert status == 200, reply
        for entry in reply["choices"][0]["logprobs"]["content"]:
            tops = entry["top_logprobs"]
            assert len(tops) == 3 and tops[0]["bytes"] == entry["bytes"]  # greedy: the chosen token leads
            assert [t["logprob"] for t in tops] == sorted((t["logprob"] for t in tops), reverse=True)
    assert replies[3][0] == 200 and replies[3][1]["choices"][0]["logprobs"] is None
