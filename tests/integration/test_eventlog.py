"""The event log on a real node: `/events` in upstream's shape, an idle node writes nothing, a
torn tail (the writer killed mid-append) never breaks a read, a full disk turns it counting-only
while completions go on."""

from __future__ import annotations

import os
import signal

import pytest

from skulk.wire.topics import EVT_CLUSTER
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import BusWatcher, wait_until
from tests.integration.serving import MODEL, http_json, wait_model_ready


@pytest.fixture
def serving(nodes, demo_model):
    node = nodes(args=("--place", MODEL), models={DEMO_DIR: demo_model})
    wait_model_ready(node)
    return node


def kinds(events: list[dict]) -> list[str]:
    return [next(iter(e)) for e in events]


def test_events_idle_silence_and_a_torn_tail(serving):
    status, events = http_json(f"{serving.url}/events")
    assert status == 200 and "InstanceCreated" in kinds(events) and "RunnerStatusUpdated" in kinds(events)
    created = next(e["InstanceCreated"] for e in events if "InstanceCreated" in e)
    assert created["instance"]["instance_id"] and isinstance(created["event_id"], int)  # snake_case inside
    assert len(http_json(f"{serving.url}/events?limit=2")[1]) == 2
    assert http_json(f"{serving.url}/events?limit=0")[0] == 400

    log = serving.home / "eventlog" / "events.log"
    before = log.stat().st_size
    watcher = BusWatcher(serving, EVT_CLUSTER.prefix)
    try:  # 12 membership messages (about 3 s) and the periodic reports in between
        for _ in range(12):
            watcher.wait_for(lambda m: True, 5)
    finally:
        watcher.close()
    assert log.stat().st_size == before, "an idle node appended to its event log"

    os.kill(serving.status()["eventlog"].pid, signal.SIGKILL)
    with log.open("ab") as f:  # what a kill mid-append leaves
        f.write(b"\x00\x00\x01\x00torn")
    status, after = http_json(f"{serving.url}/events")
    assert status == 200 and kinds(after) == kinds(events)[-len(after):] or len(after) >= len(events)
    serving.wait_ready("eventlog", min_restarts=1, timeout=20)  # restarted: the torn file archived
    status, again = http_json(f"{serving.url}/events")
    assert status == 200 and "InstanceCreated" in kinds(again)
    storage = http_json(f"{serving.url}/store/storage")[1]
    assert storage["eventLogMode"] == "writing" and storage["eventLogBytes"] > 0


def test_state_events_missed_while_the_log_was_down_are_recorded_once_after_its_restart(serving):
    """Stopped, so it hears nothing, then killed with what it was sent unread: the events of that
    gap come from the master once the role is back, each once, in index order."""
    iid = next(iter(http_json(f"{serving.url}/state")[1]["instances"]))
    pid = serving.status()["eventlog"].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        assert http_json(f"{serving.url}/instance/{iid}", method="DELETE")[0] == 200
        wait_until(serving, lambda: iid not in http_json(f"{serving.url}/state")[1]["instances"], 10,
                   "the deletion applied")
    finally:
        os.kill(pid, signal.SIGKILL)
    serving.wait_ready("eventlog", min_restarts=1, timeout=20)

    def deleted():
        events = http_json(f"{serving.url}/events")[1]
        return "InstanceDeleted" in kinds(events) and events
    events = wait_until(serving, deleted, 10, "the missed InstanceDeleted in /events")
    state_ids = [next(iter(e.values()))["event_id"] for e in events if "event_id" in next(iter(e.values()))]
    assert state_ids == sorted(set(state_ids)), "a state event recorded twice or out of order"
    assert kinds(events).count("InstanceCreated") == 1 and kinds(events).count("InstanceDeleted") == 1


def test_the_api_records_each_chunk_and_each_request_end(serving):
    status, body = http_json(f"{serving.url}/v1/chat/completions", {
        "model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "record me"}]})
    assert status == 200
    command_id = body["id"].removeprefix("chatcmpl-")

    def mine():
        events = http_json(f"{serving.url}/events?limit=200")[1]
        return [e for e in events if next(iter(e.values())).get("command_id") == command_id] or None
    records = wait_until(serving, lambda: (m := mine()) and "RequestEnded" in kinds(m) and m, 10, "the records")
    chunks = [e["ChunkGenerated"] for e in records if "ChunkGenerated" in e]
    assert kinds(records)[0] == "RequestRouted" and len(chunks) == body["usage"]["completion_tokens"]
    assert "".join(c["text"] for c in chunks) == body["choices"][0]["message"]["content"]
    ended = next(e["RequestEnded"] for e in records if "RequestEnded" in e)
    assert ended["outcome"] == "done" and ended["completion_tokens"] == len(chunks)


def test_a_full_disk_turns_the_log_counting_only_and_completions_go_on(nodes, demo_model):
    """The floor set above any disk's free space: the first check finds the disk "full"."""
    node = nodes(config={"event_log": {"floor_gb": 1e9, "floor_check_every": 1}}, args=("--place", MODEL),
                 models={DEMO_DIR: demo_model})
    wait_model_ready(node)
    storage = http_json(f"{node.url}/store/storage")[1]
    assert storage["eventLogMode"] == "counting" and "floor" in storage["eventLogReason"]
    status, body = http_json(f"{node.url}/v1/chat/completions", {
        "model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "still serving?"}]})
    assert status == 200 and body["usage"]["completion_tokens"] >= 1

    node_id = http_json(f"{node.url}/node_id")[1]

    def health():
        reasons = http_json(f"{node.url}/state")[1]["nodeHealth"][node_id]["reasons"]
        return [r for r in reasons if r["code"] == "event_log_counting_only"]
    assert wait_until(node, health, 20, "nodeHealth showing counting-only")
    log = (node.home / "logs" / "eventlog.log").read_text()
    assert log.count("CRITICAL") == 1 and "counting-only" in log
    assert http_json(f"{node.url}/events")[0] == 200
