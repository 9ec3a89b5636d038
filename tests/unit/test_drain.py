"""Draining before an in-place restart, and routing through a leader change (pure): the root's
drain clock, the master's "drained?" from the replicated state and its runners' reports, the
config key, the admin verbs, `/health` while draining, the API asking again for a route while
the leader changes, a restarted node's saved state never outranking the live nodes, and links
dialled again when their handshake fails during a key rotation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import falcon
import falcon.testing
import pytest

from skulk.cluster.state import ChatMessage, Instance, ShardMeta, State, Task, TaskParams
from skulk.node import config
from skulk.node.config import ConfigError
from skulk.services.api.links.master_client import ONCE, THROUGH_FAILOVER, WHILE_FORMING
from skulk.services.api.observe.health import HealthResource
from skulk.services.api.observe.runner_view import RunnerView
from skulk.services.master.drain import DrainWait, Pending, pending
from skulk.services.master.replication import carried_over
from skulk.supervisor import control, drain
from skulk.supervisor.spec import ChildSpec, SupervisorSpec
from skulk.supervisor.supervisor import Supervisor
from skulk.supervisor.tree import role_args
from skulk.wire.commands import CommandRejected, RejectReason, Routed
from skulk.wire.control import AdminCommand, AdminVerb
from skulk.wire.events import ChildLifecycle
from skulk.wire.models import ModelCard

CARD = ModelCard(model_id="m", storage_size_bytes=1, n_layers=4, hidden_size=8, num_key_value_heads=1,
                 supports_tensor=False, context_length=64, family="qwen2", quantization="float32")
SHARD = ShardMeta(kind="Pipeline", device_rank=0, world_size=1, start_layer=0, end_layer=4, n_layers=4)
PARAMS = TaskParams(model="m", messages=(ChatMessage(role="user", content="hi"),), max_tokens=4)


# ---- the root's drain clock ----------------------------------------------------------------------

def test_a_drain_lasts_until_its_deadline_and_repeats_its_notice():
    assert drain.begin(10.0, 0) is None  # node.drain_timeout_s 0: restart at once
    d = drain.begin(10.0, 30.0)
    assert d is not None and d.deadline == 40.0 and not drain.expired(d, 39.99) and drain.expired(d, 40.0)
    assert not drain.announce_due(d, 11.9) and drain.announce_due(d, 10.0 + drain.ANNOUNCE_EVERY_S)
    assert drain.next_deadline(d) == 10.0 + drain.ANNOUNCE_EVERY_S
    later = drain.announced(d, 39.0)
    assert not drain.announce_due(later, 40.0) and drain.next_deadline(later) == 40.0  # the deadline first


# ---- the master's "drained?" ----------------------------------------------------------------------

def instance(iid: str, nodes: dict[str, str]) -> Instance:
    return Instance(instance_id=iid, instance_meta="MlxRing", card=CARD, node_to_runner=nodes,
                    runner_to_shard={rid: SHARD for rid in nodes.values()}, context_token_limit=64)


def task(tid: str, iid: str, owner: str, status: str = "Running") -> Task:
    return Task(task_id=tid, command_id=tid, instance_id=iid, status=status, owner_node=owner, params=PARAMS)


def cluster(*tasks: Task, marked: bool = True) -> State:
    """Node a holds `ia` (runner ra) and a rank of the sharded `ix` (runner rx, rank 0 on b);
    b holds `ib`."""
    return State(session="s", instances={"ia": instance("ia", {"a": "ra"}), "ib": instance("ib", {"b": "rb"}),
                                         "ix": instance("ix", {"a": "rx", "b": "rx0"})},
                 tasks={t.task_id: t for t in tasks}, restarting={"a": 99.0} if marked else {})


def test_the_drain_begins_only_once_the_leader_has_the_mark():
    assert pending(cluster(marked=False), "a", {}) == Pending(DrainWait.NOT_MARKED)
    assert pending(cluster(), "a", {}) is None  # marked, nothing in flight: drained


def test_requests_routed_to_the_nodes_instances_are_waited_for_sharded_ones_too():
    assert pending(cluster(task("t1", "ia", "b"), task("t2", "ix", "c")), "a", {}) == Pending(DrainWait.ROUTED, 2)
    assert pending(cluster(task("t1", "ib", "b")), "a", {}) is None  # another node's instance, another API
    for ended in ("Complete", "Failed", "Cancelled", "TimedOut"):
        assert pending(cluster(task("t1", "ia", "b", ended)), "a", {}) is None
    assert pending(cluster(task("t1", "ia", "b", "Pending")), "a", {}) == Pending(DrainWait.ROUTED, 1)


def test_streams_the_nodes_api_relays_are_waited_for():
    assert pending(cluster(task("t1", "ib", "a")), "a", {}) == Pending(DrainWait.RELAYED, 1)
    assert pending(cluster(task("t1", "ib", "b")), "b", {}) == Pending(DrainWait.NOT_MARKED)


def test_runners_that_report_requests_are_waited_for_whatever_the_tasks_say():
    """A request with no task (an embedding), or a task its leader's successor did not carry."""
    assert pending(cluster(), "a", {"ra": 1, "rb": 5}) == Pending(DrainWait.RUNNERS, 1)
    assert pending(cluster(), "a", {"ra": 0, "rx": 2}) == Pending(DrainWait.RUNNERS, 1)
    assert pending(cluster(), "a", {"ra": 0, "rx": 0, "rb": 3}) is None  # b's runner is b's


# ---- config, role arguments, admin verbs -----------------------------------------------------------

def load(tmp_path: Path, text: str) -> config.NodeConfig:
    (tmp_path / "skulk.yaml").write_text(text)
    return config.load(home=tmp_path, env={})


def test_node_drain_timeout_is_strictly_typed_and_reaches_the_master(tmp_path):
    assert config.load(home=tmp_path, env={}).drain_timeout_s == 30.0
    assert load(tmp_path, "node: {drain_timeout_s: 5}\n").drain_timeout_s == 5.0
    assert load(tmp_path, "node: {drain_timeout_s: 0}\n").drain_timeout_s == 0.0
    for bad, says in (("true", "expected float"), ('"5"', "expected float"), ("-1", "0..3600"),
                      ("3601", "0..3600"), (".nan", "0..3600")):
        with pytest.raises(ConfigError, match=says):
            load(tmp_path, f"node: {{drain_timeout_s: {bad}}}\n")
    assert "node.drain_timeout_s" in config.yaml_fields()
    args = role_args(load(tmp_path, "node: {drain_timeout_s: 7.5}\n"), "master", "n1")
    assert args[args.index("--drain-timeout") + 1] == "7.5"


def tree() -> Supervisor:
    spec = SupervisorSpec(id="root", strategy="one_for_one", intensity=3, period_s=60.0,
                          children=(ChildSpec(id="bus", module="m", title="bus"),))
    return Supervisor(spec, spawn=lambda *_: None, emit=lambda *_: None,  # type: ignore[arg-type,return-value]
                      on_terminated=lambda *_: None)


def test_drained_is_a_node_verb_and_wait_is_never_met_while_draining():
    root = tree()
    assert control.apply(AdminCommand(verb=AdminVerb.DRAINED), root, [], 0.0) == control.NodeVerb(AdminVerb.DRAINED)
    assert not control.apply(AdminCommand(verb=AdminVerb.DRAINED, target="bus"), root, [], 0.0).ok  # type: ignore[union-attr]
    root.slots["bus"].state = "running"
    assert control.satisfied(root, "", 0) and not control.satisfied(root, "", 0, restarting=True)
    waiting = control.apply(AdminCommand(verb=AdminVerb.WAIT, timeout_s=5.0), root, [b"x"], 1.0, restarting=True)
    assert isinstance(waiting, control.Waiter) and waiting.deadline == 6.0  # the new image answers it


def test_an_admin_verb_travels_as_its_plain_string_and_an_unknown_one_is_refused_by_name():
    from skulk.wire.codec import decode, encode

    raw = encode(AdminCommand(verb=AdminVerb.START_CHILD, target="r1"))
    assert b"start_child" in raw and b"AdminVerb" not in raw
    back = decode(raw)
    assert isinstance(back, AdminCommand) and back.verb == AdminVerb.START_CHILD
    refused = control.apply(AdminCommand(verb="reboot"), tree(), [], 0.0)  # deliberately no AdminVerb
    assert not isinstance(refused, (control.Waiter, control.NodeVerb)) and not refused.ok
    assert refused.message == ("unknown verb 'reboot' (known: status, restart, stop, wait, start_child, "
                               "terminate_child, drained)")


# ---- /health, routing through a leader change, the saved state -------------------------------------

def test_health_says_draining_once_the_root_announces_the_restart_until_the_process_ends():
    view = RunnerView()
    for child, event in (("api", "restarting"), ("node", "stopping"), ("node", "started")):
        view.on_message(ChildLifecycle(child_id=child, supervisor="root", event=event, pid=None, restarts=0), 1.0)
    assert not view.restarting()
    view.on_message(ChildLifecycle(child_id="node", supervisor="root", event="restarting", pid=None,
                                   restarts=0, detail="admin restart"), 2.0)
    assert view.restarting()
    app = falcon.App()  # the resource itself: a 503 with /health's body shape
    app.add_route("/health", HealthResource(view, "1.2.3"))
    got = falcon.testing.TestClient(app).simulate_get("/health")
    assert got.status_code == 503 and got.json == {"status": "draining", "version": "1.2.3"}


def rejected(reason: RejectReason) -> CommandRejected:
    return CommandRejected(command_id="c", status=503, message=str(reason), reason=reason)


def test_routing_is_asked_again_for_a_leader_change_only_and_within_the_budget():
    routed = Routed(command_id="c", task_id="t", instance_id="i", runner_id="r", endpoint="tcp://x:1")
    budget = THROUGH_FAILOVER.budget_s
    for reason in (RejectReason.SESSION_CHANGED, RejectReason.NO_LEADER, RejectReason.NOT_LEADER):
        assert THROUGH_FAILOVER.again(rejected(reason), 0.0, budget - 0.1)
        assert not THROUGH_FAILOVER.again(rejected(reason), 0.0, budget)
        assert not ONCE.again(rejected(reason), 0.0, 0.0)  # a state change is never asked twice
    for reason in (RejectReason.NOT_READY, RejectReason.NO_INSTANCE, RejectReason.BAD_COMMAND):
        assert not THROUGH_FAILOVER.again(rejected(reason), 0.0, 0.0)
    assert not THROUGH_FAILOVER.again(routed, 0.0, 0.0)
    assert WHILE_FORMING.again(rejected(RejectReason.TOO_FEW_NODES), 0.0, 1.0)
    assert not WHILE_FORMING.again(rejected(RejectReason.NO_LEADER), 0.0, 1.0)


class FakeMaster:
    def __init__(self, replies: list) -> None:
        self.replies, self.sent = replies, []

    def command(self, cmd, timeout=5.0):
        self.sent.append(cmd)
        return self.replies.pop(0)


def test_routing_sends_a_fresh_command_each_time_until_a_leader_answers():
    routed = Routed(command_id="c", task_id="t", instance_id="i", runner_id="r", endpoint="tcp://x:1")
    master = FakeMaster([rejected(RejectReason.SESSION_CHANGED), rejected(RejectReason.NO_LEADER), routed])
    paused: list[float] = []
    assert THROUGH_FAILOVER.ask(master, lambda n: AdminCommand(verb=str(n)),  # any message: the ids must differ
                                clock=iter([0.0, 1.0, 5.0, 9.0]).__next__, pause=paused.append) == routed
    assert [c.verb for c in master.sent] == ["0", "1", "2"]
    late = FakeMaster([rejected(RejectReason.NO_LEADER)] * 3)
    reply = THROUGH_FAILOVER.ask(late, lambda _n: AdminCommand(verb="x"), clock=iter([0.0, 4.0, 8.0, 13.0]).__next__,
                                 pause=paused.append)
    assert isinstance(reply, CommandRejected) and len(late.sent) == 3  # the budget spent: the 503
    assert paused == [THROUGH_FAILOVER.pause_s] * 4  # a pause before each ask again, never a spin


def test_a_placement_is_asked_again_only_while_the_cluster_is_still_forming():
    placed = CommandRejected(command_id="c", status=400, message="too few", reason=RejectReason.TOO_FEW_NODES)
    master = FakeMaster([placed, placed, rejected(RejectReason.NO_INSTANCE)])
    forming = iter([True, False])
    reply = WHILE_FORMING.ask(master, lambda n: AdminCommand(verb=str(n)), still=lambda _r: next(forming),
                              clock=iter([0.0, 1.0, 2.0]).__next__, pause=lambda _s: None)
    assert reply is placed and len(master.sent) == 2  # formed, still too few: the client's 400 at once


def test_a_saved_state_never_outranks_the_live_nodes_in_a_campaign():
    saved = State(session="1-a-x", master_node_id="a", last_event_applied_idx=812,
                  instances={"ia": instance("ia", {"a": "ra"})}, tasks={"t": task("t", "ia", "a")})
    carried = carried_over(saved, "a", age_s=3.0)
    assert carried is not None and carried.last_event_applied_idx == -1
    assert carried.instances == saved.instances and not carried.tasks and not carried.runners
    assert carried_over(replace(saved, master_node_id="b"), "a", 3.0) is None


def test_a_link_refused_during_a_rotation_is_dialled_again_at_most_once_a_second():
    from skulk.wire import curve

    assert curve.redial_due(True, None, 5.0) and curve.redial_due(True, 4.0, 5.0)
    assert not curve.redial_due(True, 4.5, 5.0)  # a stranger's port refuses every key: not in a loop
    assert not curve.redial_due(False, None, 5.0)  # one key: nothing else to try
    one, two = curve.ClusterKeys((curve.Keypair(b"p" * 40, b"s" * 40),)), None
    try:
        curve.configure(one)
        assert not curve.rotating()
        curve.configure(curve.ClusterKeys(one.keys * 2))
        assert curve.rotating()
    finally:
        curve.configure(two)
    assert not curve.rotating()
