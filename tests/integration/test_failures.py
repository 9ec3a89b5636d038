"""Runner failures with fault injection: a wedged warmup and a crash loop delete the instance
loudly while clients keep asking (each gets an immediate answer); the node keeps serving.
In-place restarts of this node (drained: its streams finish) and of a peer; keep-alives and the
stall timeout."""

from __future__ import annotations

import time

from skulk.supervisor.tree import ROLES
from skulk.wire.control import AdminVerb
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import wait_until
from tests.integration.patience import patience
from tests.integration.serving import MODEL, NO_RESUME, http_json
from tools.stream_load import StreamLoad, chat_body, summary


def ask_meanwhile(node, clients: int = 4) -> tuple[StreamLoad, float]:
    """Clients (streaming and not) sent while the placed instance is failing: each must get an
    answer that does not wait for the instance (404/503 or the error event), never a hang."""
    from tests.integration.cluster import state_of

    wait_until(node, lambda: (state_of(node) or {}).get("instances"), 30, "the instance placed")
    bodies = [chat_body(MODEL, "hello?", 50, stream=i % 2 == 0) for i in range(clients)]
    return StreamLoad("127.0.0.1", node.api_port, bodies, read_timeout=30).start(), time.monotonic()


def answered_at_once(load: StreamLoad, sent: float, what: str) -> None:
    outcomes = load.join(patience(30))
    print(f"{what}:\n{summary(outcomes, sent)}")
    assert not any(o.hung for o in outcomes)
    assert all(o.ended_at is not None for o in outcomes)  # times printed above, not asserted
    assert all(o.error is not None or o.status in (404, 503) for o in outcomes), [o.status for o in outcomes]


def deleted_reason(node, needle: str):
    def check():
        _, state = http_json(f"{node.url}/state")
        notes = [d["reason"] for d in state["deletedInstances"].values()]
        return not state["instances"] and next((r for r in notes if needle in r), None)
    return check


def test_wedged_warmup_is_loud_not_retried_and_deletes_the_instance(nodes, demo_model):
    # `failed=slow:0.5`: the leader deletes the instance and the supervisor stops the runner before
    # it exits, as on a slow machine: the exit is still the wedge's 86, not a clean stop's 0.
    node = nodes(config={"runner": {"warmup_deadline_s": 3.0}},
                 env={"SKULK_FAULTS": "runner@warmup=hang,runner@failed=slow:0.5"},
                 args=("--place", MODEL), models={DEMO_DIR: demo_model}, ready=False)
    t0 = time.monotonic()
    answered_at_once(*ask_meanwhile(node), "requests while the runner is wedged in warmup")
    reason = wait_until(node, deleted_reason(node, "not retried"), 60, "wedge handled")
    print(f"wedged warmup: instance deleted {time.monotonic() - t0:.2f}s after the node was up: {reason}")
    assert "exit code 86" in reason or "exceeded its 3s deadline" in reason
    runner_log = next((node.home / "logs").glob("runner-*.log")).read_text()
    assert "CRITICAL" in runner_log and "exceeded its 3s deadline" in runner_log
    assert "GPU may be wedged" in runner_log and "reboot" in runner_log
    log = node.home / "logs" / "supervisor.log"
    supervisor = wait_until(node, lambda: t if "exit code 86" in (t := log.read_text()) else None,
                            30, "the runner's exit logged")
    assert supervisor.count(" started (pid") == len(ROLES) + 1  # the roles + 1 runner: never restarted
    assert http_json(f"{node.url}/health")[0] == 200
    assert http_json(f"{node.url}/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "x"}]})[0] == 404


def test_a_crash_loop_deletes_the_instance_and_says_why(nodes, demo_model):
    node = nodes(env={"SKULK_FAULTS": "runner@load=crash"}, args=("--place", MODEL),
                 models={DEMO_DIR: demo_model}, ready=False)
    t0 = time.monotonic()
    answered_at_once(*ask_meanwhile(node), "requests during the crash loop")
    reason = wait_until(node, deleted_reason(node, "crash loop"), 60, "crash loop handled")
    print(f"crash loop: instance deleted {time.monotonic() - t0:.2f}s after the node was up: {reason}")
    assert "3 runner failures within 60s" in reason
    assert "crash loop" in (node.home / "logs" / "master.log").read_text()
    from skulk.cluster.state import InstanceDeleted
    from skulk.node.eventlog_files import read_records
    from skulk.wire.codec import decode
    from skulk.wire.topics import state_event_topic

    def logged():  # the event log writes behind the bus: wait for it, do not race it
        events = [decode(p) for _, t, p in read_records(node.home / "eventlog" / "events.log")
                  if t.startswith(state_event_topic(InstanceDeleted))]
        return any("crash loop" in e.event.reason and e.event.cause == "given_up" for e in events)

    wait_until(node, logged, 10, "the crash loop in the event log")
    assert all(c.restarts == 0 for c in node.status().values() if c.supervisor == "root")


def test_post_admin_restart_drains_then_replaces_the_node_in_place_and_serves_again(nodes, demo_model):
    """Streams running on the node's runner when `POST /admin/restart` arrives finish with every
    token and their finish reason: the node drains (its `/health` says so with a 503) and only
    then stops and execs; it comes back with the same PID and node id and serves again."""
    from tests.integration.serving import wait_model_ready

    max_tokens = 1000
    # The drain waits for the streams, however slow the machine: 3 x 1000 tokens took 31 s under a
    # CPU quota of a third of a 2-core machine, past the default 30-s drain deadline.
    drain = {"node": {"drain_timeout_s": min(3600.0, patience(120))}}
    node = nodes(args=("--place", MODEL), models={DEMO_DIR: demo_model}, config=drain)
    wait_model_ready(node)
    _, before = http_json(f"{node.url}/state")
    (iid,) = before["instances"]
    _, node_id = http_json(f"{node.url}/node_id")
    old_api = node.status()["api"].pid
    streams = StreamLoad("127.0.0.1", node.api_port, [chat_body(MODEL, "Go on and on.", max_tokens)
                                                      for _ in range(3)], read_timeout=60).start()
    assert streams.wait_for(lambda outs: all(o.tokens for o in outs), patience(60))
    t0 = time.monotonic()
    status, body = http_json(f"{node.url}/admin/restart", b"")
    assert status == 200 and body == {"status": "restarting", "node_id": node_id}
    health = wait_until(node, lambda: (h := http_json(f"{node.url}/health"))[0] == 503 and h, 10,
                        "/health says draining")
    running = sum(not o.done for o in streams.outcomes)
    assert health[1]["status"] == "draining"
    outcomes = streams.join(patience(60))
    print(f"streams in flight during POST /admin/restart ({running} still running when /health said "
          f"draining):\n{summary(outcomes, t0)}")
    assert all(o.done and o.error is None and o.finish_reason == "length" and o.tokens == max_tokens
               for o in outcomes), summary(outcomes, t0)

    wait_until(node, lambda: node.back_in_place(old_api), 60, "node back in place")
    supervisor_log = (node.home / "logs" / "supervisor.log").read_text()
    assert "restart: the node's requests have ended after" in supervisor_log  # not the drain deadline
    master_log = (node.home / "logs" / "master.log").read_text()
    assert "drain: waiting: requests still running on this node's instances" in master_log  # it waited
    wait_model_ready(node)
    took = time.monotonic() - t0
    # The new image knew a runner would be wanted: its runner was a standby, importing its engine
    # while the roles booted.
    assert [c.standby for c in node.status().values() if c.id.startswith("runner-")] == [True]
    _, after = http_json(f"{node.url}/state")
    print(f"POST /admin/restart: drained, same pid {node.pid}, same node id, instance served again "
          f"{took:.2f}s later")
    assert http_json(f"{node.url}/node_id")[1] == node_id and iid in after["instances"]
    wait_until(node, lambda: http_json(f"{node.url}/health")[0] == 200, 10, "/health back to 200")
    ok, _ = http_json(f"{node.url}/v1/chat/completions", {
        "model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "back?"}]})
    assert ok == 200 and node.proc.poll() is None
    assert http_json(f"{node.url}/admin/restart?node_id=nobody", b"")[0] == 404


def test_a_drain_ends_at_its_deadline_and_a_stop_cuts_it_short(nodes, demo_model):
    """A request that does not finish (its runner stalls in a decode step for 6 s) holds a
    restart's drain only until `node.drain_timeout_s` (1.5 s here): the node restarts anyway.
    During the next drain an orderly stop stops the node at once, exit 0."""
    from tests.integration.serving import wait_model_ready

    node = nodes(config={"node": {"drain_timeout_s": 1.5}, **NO_RESUME}, env={"SKULK_FAULTS": "runner@decode:8=slow:6"},
                 args=("--place", MODEL), models={DEMO_DIR: demo_model})
    wait_model_ready(node)
    log = node.home / "logs" / "supervisor.log"

    def stalled_stream() -> StreamLoad:
        load = StreamLoad("127.0.0.1", node.api_port, [chat_body(MODEL, "Go on.", 50)], read_timeout=60).start()
        assert load.wait_for(lambda outs: outs[0].tokens >= 4, patience(60))  # the runner stalls at step 8
        return load

    first = stalled_stream()
    old_api = node.status()["api"].pid
    t0 = time.monotonic()
    assert http_json(f"{node.url}/admin/restart", b"")[0] == 200
    wait_until(node, lambda: "drain deadline (1.5s, node.drain_timeout_s) passed" in log.read_text(), 20,
               "the drain deadline")
    took = time.monotonic() - t0
    (cut,) = first.join(patience(30))
    print(f"drain deadline: restarted {took:.2f}s after POST /admin/restart; the stalled stream: "
          f"{cut.tokens} tokens, {cut.error or cut.finish_reason}")
    assert cut.error  # it could not finish: cut by the restart, as before the drain existed

    wait_until(node, lambda: node.back_in_place(old_api), 60, "node back in place")
    wait_model_ready(node)
    second = stalled_stream()
    assert http_json(f"{node.url}/admin/restart", b"")[0] == 200
    wait_until(node, lambda: log.read_text().count("draining first") == 2, 10, "the second drain")
    t0 = time.monotonic()
    assert node.admin(AdminVerb.STOP).ok
    assert node.proc.wait(timeout=patience(15)) == 0
    print(f"an orderly stop during a drain: exit 0 {time.monotonic() - t0:.2f}s later")
    second.join(patience(30))
    assert "restarting in place" not in log.read_text().split("draining first")[-1]


def test_post_admin_restart_of_a_peer_node_through_another_nodes_api(nodes, demo_model):
    """`?node_id=<peer>`: API -> master -> the peer's master -> its supervisor. The peer keeps
    its PID and node id, rejoins with no manual step and serves its instance again. Its gossip
    boots 2 s late (fault injection), longer than the 1 s a dropped link has to say hello
    again: the leader keeps the node and its instance because the node said it was restarting."""
    import uuid

    from tests.integration.cluster import FAST, converged, node_args, state_of

    namespace = f"t-{uuid.uuid4().hex[:8]}"
    a = nodes("a", config=FAST, args=node_args(namespace, []), models={DEMO_DIR: demo_model})
    # a command executed on a alone makes it outrank a fresh b: a leads, b's own saved state
    # cannot carry the instance over, only the leader's restart grace keeps it
    _, first = http_json(f"{a.url}/place_instance", {"model_id": MODEL})
    assert http_json(f"{a.url}/instance/{first['instance_id']}", method="DELETE")[0] == 200
    b = nodes("b", config=FAST, args=node_args(namespace, [a]), models={DEMO_DIR: demo_model},
              env={"SKULK_FAULTS": "gossip@boot=slow:2"})
    formed = wait_until(a, lambda: converged([a, b], 2), 30, "formation")
    a_id, b_id = http_json(f"{a.url}/node_id")[1], http_json(f"{b.url}/node_id")[1]
    assert formed["master"] == a_id
    status, body = http_json(f"{a.url}/place_instance", {"model_id": MODEL, "excluded_nodes": [a_id]})
    assert status == 200, body
    iid = body["instance_id"]

    def served_from_b():
        state = state_of(a) or {"instances": {}, "runners": {}}
        inst = state["instances"].get(iid)
        rids = next(iter(inst.values()))["shardAssignments"]["runnerToShard"] if inst else []
        return rids and all("RunnerReady" in state["runners"].get(r, {}) for r in rids)

    wait_until(a, served_from_b, 60, "instance ready on b")
    old_api = b.status()["api"].pid
    t0 = time.monotonic()
    status, body = http_json(f"{a.url}/admin/restart?node_id={b_id}", b"")
    assert status == 200 and body == {"status": "restart_sent", "node_id": b_id}

    wait_until(b, lambda: b.back_in_place(old_api), 60, "peer restarted in place")
    wait_until(a, lambda: converged([a, b], 2) and served_from_b(), 60, "rejoined and serving")
    print(f"POST /admin/restart?node_id=<peer>: same pid, same node id, rejoined and its instance "
          f"served again {time.monotonic() - t0:.2f}s later")
    assert b.proc.poll() is None and http_json(f"{b.url}/node_id")[1] == b_id
    assert iid not in state_of(a)["deletedInstances"]  # kept through the restart, never lost
    wait_until(a, lambda: (state_of(a) or {"restartingNodes": 1})["restartingNodes"] == {}, 10,
               "the restart mark cleared by the node's new image")
    status, reply = http_json(f"{a.url}/v1/chat/completions", {
        "model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "back?"}]})
    assert status == 200, reply


def test_keepalives_during_a_slow_prefill_and_a_stalled_stream_ends_with_an_error(nodes, demo_model):
    """A slow prefill sends SSE keep-alive comments and is not a stall (the stall timeout arms
    at the first token); a stream that then goes silent past the stall timeout ends with
    upstream's error and `[DONE]`, and the runner is told to stop."""
    import http.client
    import json

    from tests.integration.serving import sse_events, wait_model_ready

    node = nodes(config={"api": {"keepalive_s": 0.5, "stall_timeout_s": 1.5}},
                 env={"SKULK_FAULTS": "runner@prefill=slow:2,runner@decode:5=slow:4"},
                 args=("--place", MODEL), models={DEMO_DIR: demo_model})
    runner = wait_model_ready(node)
    conn = http.client.HTTPConnection("127.0.0.1", node.api_port, timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": MODEL, "max_tokens": 50, "stream": True, "temperature": 0,
        "messages": [{"role": "user", "content": "Tell me a long story."}]}), {"Content-Type": "application/json"})
    frames, last_token_at, stalled_after, error = [], None, None, ""
    for kind, payload in sse_events(conn.getresponse()):
        frames.append((kind, payload))
        if kind == "data" and isinstance(payload, dict) and "choices" in payload:
            last_token_at = time.monotonic()
        if kind == "data" and isinstance(payload, dict) and "error" in payload:
            stalled_after = time.monotonic() - last_token_at
            error = payload["error"]["message"]
    first_data = next(i for i, f in enumerate(frames) if f[0] == "data")
    before = [f for f in frames[:first_data] if f == ("comment", "keep-alive")]
    print(f"slow prefill: {len(before)} keep-alive comments before the first token; stall error "
          f"{stalled_after:.2f}s after the last token (stall timeout 1.5 s): {error}")
    assert len(before) >= 3  # the opening one + at least two during the 2 s prefill
    assert error == "Stream stalled: no output for 1.5s; the response may be incomplete."
    assert frames[-1] == ("data", "[DONE]")  # the stall message names the timeout; the time is printed
    log = node.home / "logs" / f"{runner}.log"
    wait_until(node, lambda: " cancelled" in log.read_text(), 20,
               "the runner told to stop the stalled request")
