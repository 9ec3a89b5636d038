"""Each failure reproduced under load (several concurrent clients, streaming and not): every
client gets its answer or its error (the fast path's error, not a stall timeout's), none hangs
(every wait has a deadline), and the cluster serves the model again afterwards. Every measured
time is printed; the 2 s target is checked by `tools.bench_node_kill`, not here."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest

from skulk.supervisor.tree import RUNNER_SHUTDOWN_S
from skulk.wire.commands import (
    INSTANCE_DELETED,
    INSTANCE_LOST,
    NO_INSTANCE,
    NO_READY_INSTANCE,
    RUNNER_LOST,
    SESSION_CHANGED,
)
from tests.integration.cluster import FAST, converged, node_args, place_and_wait, state_of
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import wait_until
from tests.integration.patience import patience
from tests.integration.serving import MODEL, NO_RESUME, http_json, wait_model_ready
from tools.stream_load import StreamLoad, chat_body, summary

PROMPT = "Explain, step by step and at length, why errors should never pass silently."


def lost_error(message: str) -> bool:
    """One of the retryable errors the fault's detection sends (runner lost, instance lost or
    deleted, or, for a request a lost leader was routing, session changed), or routing's
    immediate answer to a request routed after the instance went (404 none, 503 not ready yet):
    never the stall timeout's."""
    return message == SESSION_CHANGED or message.startswith(
        (RUNNER_LOST.split("(")[0], INSTANCE_LOST, INSTANCE_DELETED, NO_INSTANCE.split("{")[0],
         NO_READY_INSTANCE.split("{")[0]))


def load(node, streams: int, plain: int = 0, max_tokens: int = 400) -> StreamLoad:
    bodies = [chat_body(MODEL, PROMPT, max_tokens) for _ in range(streams)]
    bodies += [chat_body(MODEL, PROMPT, max_tokens, stream=False) for _ in range(plain)]
    return StreamLoad("127.0.0.1", node.api_port, bodies, read_timeout=patience(60)).start()


def producing(clients: StreamLoad, node) -> None:
    """Wait (on the clients' own signal) until a client is mid-stream: a first token and not
    yet done. A non-streaming client only counts its tokens when it is done, so it must not
    count here (the fault would land on a runner that just finished)."""
    assert clients.wait_for(lambda outs: any(o.tokens > 0 and not o.done for o in outs), 60), \
        f"no tokens flowing\n{summary(clients.outcomes)}\n{node.log_tail()}"


def running_runners(node) -> dict[str, str]:
    """runner id -> instance id, for runners with requests in hand right now: an open task on
    their instance and, by the runner's own last report, requests in its batch (a task's end
    reaches the state after its runner has finished it: a kill chosen by tasks alone could land
    on a runner whose requests had just ended)."""
    state = http_json(f"{node.url}/state")[1]
    busy = {t["TextGeneration"]["instanceId"] for t in state["tasks"].values()
            if t["TextGeneration"]["taskStatus"] in ("Pending", "Running")}
    pools = [p for c in http_json(f"{node.url}/admin/clusters")[1]["clusters"] for p in c["pools"]]
    return {r["runnerId"]: p["instanceId"] for p in pools if p["instanceId"] in busy and p["activeRequests"]
            for r in p["ranks"]}


def served(node, max_tokens: int = 4) -> None:
    status, body = http_json(f"{node.url}/v1/chat/completions", chat_body(MODEL, "again?", max_tokens, False))
    assert status == 200 and body["usage"]["completion_tokens"] > 0, body


def failed_task_kinds(node, count: int) -> list[str] | None:
    """The `error_type` of each `TaskFailed` in the node's event log, once there are `count`
    (the event log writes behind the bus: waited for, never raced)."""
    from skulk.cluster.state import TaskFailed
    from skulk.node.eventlog_files import read_records
    from skulk.wire.codec import decode
    from skulk.wire.topics import state_event_topic

    kinds = [decode(p).event.error_type for _, t, p in read_records(node.home / "eventlog" / "events.log")
             if t.startswith(state_event_topic(TaskFailed))]
    return kinds if len(kinds) >= count else None


def check_outcomes(outcomes, fault_at: float, what: str, may_finish: bool = False) -> list[float]:
    """No client hung; each got an error (or, where allowed, its whole answer); print it all."""
    print(f"{what}:\n{summary(outcomes, fault_at)}")
    assert not any(o.hung for o in outcomes), "a client was left hanging"
    times = [o.error_at - fault_at for o in outcomes if o.error is not None]
    assert all(o.error is not None or (o.done and (may_finish or o.ended_at < fault_at)) for o in outcomes)
    assert times, "no client got an error"
    assert all(lost_error(o.error) for o in outcomes if o.error), [o.error for o in outcomes]
    return times


def test_sigabrt_of_one_runner_under_many_long_requests(nodes, demo_model):
    """Many concurrent long requests, one runner killed with SIGABRT: no client hangs; the
    other instance finishes its requests; new requests are served at once."""
    node = nodes(args=("--place", MODEL), models={DEMO_DIR: demo_model}, config=NO_RESUME)
    wait_model_ready(node)
    assert http_json(f"{node.url}/place_instance", {"model_id": MODEL})[0] == 200
    for attempt in range(2):
        wait_until(node, lambda: len(running_runners(node) or {}) == 0 and sum(
            "RunnerReady" in s for s in http_json(f"{node.url}/state")[1]["runners"].values()) == 2,
            60, "two ready instances")
        # Long answers (~15 s each here): on a busy machine this process may take seconds between
        # seeing the victim busy and the kill, and the victim must still be mid-answer then (with
        # 300 tokens its four answers once ended 0.1 s before the SIGABRT landed).
        started = time.monotonic()
        clients = load(node, streams=6, plain=2, max_tokens=1000)
        producing(clients, node)  # (under CPU contention the two instances' streams need not overlap)
        seen_at = time.monotonic()
        # (a runner's report of its batch follows its first tokens: at most 50 ms, on a busy machine more)
        busy = wait_until(node, lambda: running_runners(node), 10, "a runner reporting requests in hand")
        victim, victim_instance = next(iter(busy.items()))
        before = node.status()
        pid = before[victim].pid
        fault_at = time.monotonic()
        os.kill(pid, signal.SIGABRT)
        print(f"attempt {attempt}: tokens flowing {seen_at - started:.2f}s after the load began, the victim "
              f"chosen and killed {fault_at - seen_at:.2f}s later")
        # A new request right after the fault: served by the healthy instance, or (routed in the
        # moment before the state knew) an immediate error, never a wait.
        sent = time.monotonic()
        status, body = http_json(f"{node.url}/v1/chat/completions", chat_body(MODEL, "again?", 4, False))
        print(f"a new request sent {sent - fault_at:.3f}s after the SIGABRT: HTTP {status} after "
              f"{time.monotonic() - sent:.2f}s")
        assert status == 200 or (status == 500 and lost_error(body["error"]["message"])), body
        outcomes = clients.join(patience(90))
        if any(o.error or not o.done for o in outcomes):
            break
        # Every answer was whole: the kill landed after the victim's last token (a machine too
        # busy to act within its ~15 s of answers). Nothing was tested: once more, on the
        # instance re-created from the victim's.
        print(f"the SIGABRT came after every answer had ended:\n{summary(outcomes, fault_at)}")
    times = check_outcomes(outcomes, fault_at, "SIGABRT of one runner, 8 clients", may_finish=True)
    assert sum(o.done and o.error is None for o in outcomes) >= 1  # the healthy instance's share
    state = http_json(f"{node.url}/state")[1]
    assert "signal 6 (SIGABRT)" in state["deletedInstances"][victim_instance]["reason"]
    assert all("Runner shutdown before completing command" in o.error for o in outcomes if o.error)
    print(f"{len(times)} clients of the aborted instance got the error {max(times):.3f}s after "
          f"the fault at worst")
    wait_until(node, lambda: len(http_json(f"{node.url}/state")[1]["instances"]) == 2, 30, "re-created")
    served(node)
    # The re-created runner was the standby made when the victim exited (its engine imported
    # before the leader asked for it); the first one came from the standby made at start.
    (recreated,) = [c for c in node.status().values() if c.id.startswith("runner-") and c.id not in before]
    assert recreated.standby and recreated.forked, recreated
    assert sum(c.standby for c in before.values()) == 1 or attempt, before  # (after a second attempt: 1 or 2)


def test_python_exception_mid_decode_under_load(nodes, demo_model):
    node = nodes(args=("--place", MODEL), models={DEMO_DIR: demo_model}, config=NO_RESUME,
                 env={"SKULK_FAULTS": "runner@decode:200=crash"})
    first = wait_model_ready(node)
    clients = load(node, streams=3, plain=1)
    outcomes = clients.join(patience(60))  # the fault fires by itself, at the 200th token of the first request
    assert "injected crash in runner at decode:200" in (node.home / "logs" / f"{first}.log").read_text()
    fault_at = min(o.error_at for o in outcomes if o.error_at)  # the runner's exit is the fault
    check_outcomes(outcomes, fault_at, "Python exception at decode step 200, 4 clients")
    assert all(o.tokens <= 200 for o in outcomes)
    wait_model_ready(node, exclude=(first,))
    served(node)  # short enough not to reach the faulty step


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_node_loss_mid_generation_under_load_heals(nodes, demo_model, how):
    """The only instance's node is lost (SIGKILL, or SIGSTOP: silent) while four clients of the
    other node stream from it: the instance is placed again on the node that remains, and every
    client's answer goes on there (`api.resume`), none gets an error; a request sent just after
    the loss waits for the new instance and is answered."""
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    a = nodes("a", config=FAST, args=node_args(namespace, []), models={DEMO_DIR: demo_model})
    b = nodes("b", config=FAST, args=node_args(namespace, [a]), models={DEMO_DIR: demo_model})
    formed = wait_until(a, lambda: converged([a, b], 2), 30, "formation")
    a_id = http_json(f"{a.url}/node_id")[1]
    status, body = http_json(f"{a.url}/place_instance", {"model_id": MODEL, "excluded_nodes": [a_id]})
    assert status == 200, body
    iid = body["instance_id"]
    wait_until(a, lambda: running_runners(a) == {} and any(
        "RunnerReady" in s for s in (state_of(a) or {"runners": {}})["runners"].values()), 60, "ready on b")
    clients = load(a, streams=3, plain=1, max_tokens=300)
    producing(clients, a)
    fault_at = time.monotonic()
    os.killpg(b.pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
    try:
        status, reply = http_json(f"{a.url}/v1/chat/completions", chat_body(MODEL, "again?", 4, False), timeout=120)
        print(f"node {how}: a request sent at the loss answered HTTP {status} {time.monotonic() - fault_at:.1f}s "
              "after the fault")
        assert status == 200 and reply["usage"]["completion_tokens"] > 0, reply
        outcomes = clients.join(patience(120))
        print(f"node {how} mid-generation, 4 clients via the other node:\n{summary(outcomes, fault_at)}")
        assert not any(o.hung for o in outcomes), "a client was left hanging"
        assert all(o.done and o.error is None for o in outcomes), [o.error for o in outcomes]
        # Lost capacity came back by itself: placed again on the node that remains (the only
        # one), 2 s after the loss (placement.replace_lost_after_s).
        note = (state_of(a) or {}).get("deletedInstances", {}).get(iid, {})
        assert note.get("cause") == "node_lost" and note.get("replacedBy"), note
        assert "placing it again in 2s" in note["reason"], note
        print(f"node {how}: every answer went on on the survivor; all done "
              f"{max(o.ended_at for o in outcomes) - fault_at:.1f}s after the fault")
    finally:
        if how == "frozen":
            os.killpg(b.pid, signal.SIGCONT)
    # A thawed node (a follower, or the old leader: it knows it was frozen) follows the leader
    # that served meanwhile: no new session; nothing moves back to it.
    everyone = [a] if how == "killed" else [a, b]
    rejoined = wait_until(a, lambda: converged(everyone, len(everyone)), 30, "one cluster again")
    assert rejoined["master"] == a_id, (formed["master"], rejoined["master"], a_id)
    (inst,) = state_of(a)["instances"].values()
    assert list(inst["MlxRingInstance"]["shardAssignments"]["nodeToRunner"]) == [a_id], inst
    served(a)


def test_master_loss_keeps_live_streams_and_fails_boundary_commands(nodes, demo_model):
    """The leader's tree is killed while a stream runs on another node: the stream finishes
    (tokens never pass through the master); a command in flight at the session boundary gets
    the session-changed error; afterwards the new leader serves."""
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    env = {"SKULK_FAULTS": "runner@decode:8=slow:5"}  # the stream spans the failover
    cluster = []
    for i in range(3):
        cluster.append(nodes(f"n{i}", config=FAST, env=env, args=node_args(namespace, cluster[:1]),
                             models={DEMO_DIR: demo_model}))
    first = wait_until(cluster[0], lambda: converged(cluster, 3), 30, "formation")
    ids = {http_json(f"{n.url}/node_id")[1]: n for n in cluster}
    master = ids[first["master"]]
    via = next(n for n in cluster if n is not master)
    status, body = http_json(f"{via.url}/place_instance", {"model_id": MODEL, "excluded_nodes": [first["master"]]})
    assert status == 200, body
    wait_until(via, lambda: any("RunnerReady" in s for s in (state_of(via) or {"runners": {}})["runners"].values()),
               60, "instance ready")
    clients = load(via, streams=2, plain=1, max_tokens=24)
    producing(clients, via)
    streaming = [o.tokens > 0 and not o.done for o in clients.outcomes]  # routed, runner alive
    fault_at = time.monotonic()
    master.kill_all()
    boundary: dict[str, object] = {}

    def in_flight() -> None:
        boundary["reply"] = http_json(f"{via.url}/place_instance", {"model_id": MODEL}, timeout=30)
        boundary["at"] = time.monotonic()

    sender = threading.Thread(target=in_flight)
    sender.start()
    sender.join(patience(30))
    assert not sender.is_alive()
    status, reply = boundary["reply"]
    print(f"master killed: a placement in flight got HTTP {status} {boundary['at'] - fault_at:.2f}s later: {reply}")
    assert status == 503 and reply["error"]["message"] == SESSION_CHANGED
    outcomes = clients.join(patience(90))
    print(f"requests whose runner lives, through the failover:\n{summary(outcomes, fault_at)}")
    for o in outcomes:
        print(f"  ended {o.ended_at - fault_at:.2f}s after the master was killed")
    finished = [o.done and o.error is None and o.finish_reason == "length" for o in outcomes]
    assert all(f for f, s in zip(finished, streaming) if s), "a stream whose runner lives was cut"
    # A request not yet routed when the leader died was a command in flight at the session
    # boundary: the session-changed error (503, to retry) is its answer, never a hang.
    assert all(f or o.error == SESSION_CHANGED for f, o in zip(finished, outcomes)), summary(outcomes)
    survivors = [n for n in cluster if n is not master]
    wait_until(via, lambda: converged(survivors, 2), 30, "new master")
    served(via)


def test_a_crashed_rank_stops_its_sibling_and_the_sharded_instance_is_recreated(nodes, demo_model):
    """Pipeline x2: rank 1's runner is SIGKILLed mid-stream. The clients get their error, the
    leader deletes the instance, the other node stops its sibling rank at once, and the
    instance is re-created across both nodes with back-off and serves again."""
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    a = nodes("a", config={**FAST, **NO_RESUME}, args=node_args(namespace, []), models={DEMO_DIR: demo_model})
    b = nodes("b", config={**FAST, **NO_RESUME}, args=node_args(namespace, [a]), models={DEMO_DIR: demo_model})
    wait_until(a, lambda: converged([a, b], 2), 30, "formation")
    iid, _, _ = place_and_wait(a, [a], {"model_id": MODEL, "min_nodes": 2, "sharding": "Pipeline"}, timeout=60)

    def ranks(state, instance_id):
        inst = state["instances"].get(instance_id)
        if not inst:
            return None
        shards = next(iter(inst.values()))["shardAssignments"]["runnerToShard"]
        return {next(iter(m.values()))["deviceRank"]: r for r, m in shards.items()}

    def ready(instance_id):
        state = state_of(a) or {"instances": {}, "runners": {}}
        found = ranks(state, instance_id)
        return found if found and all("RunnerReady" in state["runners"].get(r, {}) for r in found.values()) else None

    by_rank = wait_until(a, lambda: ready(iid), 60, "Pipeline x2 ready")
    victim_node = next(n for n in (a, b) if by_rank[1] in n.status())
    sibling_node = next(n for n in (a, b) if by_rank[0] in n.status())
    clients = load(a, streams=6, max_tokens=1000)  # one batch of 6 on the instance
    producing(clients, a)
    fault_at = time.monotonic()
    os.kill(victim_node.status()[by_rank[1]].pid, signal.SIGKILL)
    outcomes = clients.join(patience(30))
    check_outcomes(outcomes, fault_at, "rank 1 of a Pipeline x2 instance SIGKILLed, a batch of 6 clients")
    again = wait_until(a, lambda: next((i for i in (state_of(a) or {"instances": {}})["instances"]
                                        if i != iid and ready(i)), None), 60, "re-created")
    print(f"re-created as {again} across both nodes, ready {time.monotonic() - fault_at:.2f}s after the kill")
    assert len(ranks(state_of(a), again)) == 2
    # the cause, whichever rank's report came first (rank 0's is only that it lost rank 1)
    wait_until(a, lambda: "signal 9 (SIGKILL)" in ((state_of(a) or {}).get("deletedInstances", {}).get(iid) or {})
               .get("reason", ""), 20, "the deletion note names the SIGKILL")
    wait_until(sibling_node, lambda: by_rank[0] not in sibling_node.status(), 20, "sibling rank stopped")
    print(f"the sibling rank on the other node was gone {time.monotonic() - fault_at:.2f}s after the kill "
          f"(a rank blocked in a collective gets SIGKILL {RUNNER_SHUTDOWN_S:.0f}s after SIGTERM)")
    # rank 0 losing its follower is an expected end: one log line, no traceback
    assert "lockstep.FollowerUnreachable" not in sibling_node.log_path.read_text(errors="replace")
    served(a)


def test_a_recreation_pending_when_the_leader_is_lost_is_made_by_the_next_leader(nodes, demo_model):
    """A runner fails and, during its back-off, the leader's whole tree is killed: the pending
    re-creation is replicated state, so the new leader makes it when it falls due."""
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    config = {**FAST, "runner": {"recreate_backoff_s": 8.0}}  # longer than an election takes
    a = nodes("a", config=config, args=node_args(namespace, []), models={DEMO_DIR: demo_model})
    b = nodes("b", config=config, args=node_args(namespace, [a]), models={DEMO_DIR: demo_model})
    first = wait_until(a, lambda: converged([a, b], 2), 30, "formation")
    by_id = {http_json(f"{n.url}/node_id")[1]: n for n in (a, b)}
    leader = by_id[first["master"]]
    survivor_id, survivor = next((i, n) for i, n in by_id.items() if n is not leader)
    status, body = http_json(f"{survivor.url}/place_instance",
                             {"model_id": MODEL, "excluded_nodes": [first["master"]]})
    assert status == 200, body
    iid = body["instance_id"]
    runner = wait_model_ready(survivor)
    fault_at = time.monotonic()
    os.kill(survivor.status()[runner].pid, signal.SIGKILL)

    def note(field: str):
        return ((state_of(survivor) or {}).get("deletedInstances") or {}).get(iid, {}).get(field)

    wait_until(survivor, lambda: note("recreateAt"), 10, "the pending re-creation replicated")
    leader.kill_all()
    print(f"leader killed {time.monotonic() - fault_at:.2f}s after the runner, during its 8s back-off")
    again = wait_until(survivor, lambda: note("replacedBy"), 30, "re-created by the new leader")
    state = state_of(survivor)
    assert state["masterNodeId"] == survivor_id and again in state["instances"]
    wait_model_ready(survivor, exclude=(runner,))
    print(f"re-created as {again} by the new leader; ready {time.monotonic() - fault_at:.2f}s after the kill")
    served(survivor)
