"""An in-place restart as the master sees it (no processes: `master_sim.Sim`): the drain waits for
the leader's restart mark and the node's open tasks, then tells the supervisor once (again if it
could not take it); a second restart while one is pending is the 409."""

from __future__ import annotations

from skulk.cluster.state import NodeRestarting
from skulk.services.master.core import CoreSettings, MasterCore
from skulk.services.master.effects import Answer, Instant, TellSupervisor
from skulk.wire.cluster import LocalEvent
from skulk.wire.commands import (
    RESTART_PENDING,
    CommandAccepted,
    CommandRejected,
    PlaceInstance,
    RejectReason,
    RestartNode,
    Routed,
    TaskFinished,
    TextGeneration,
)
from skulk.wire.control import AdminVerb
from skulk.wire.events import ChildLifecycle
from tests.unit.builders import CARD, PARAMS
from tests.unit.master_sim import Sim, place, serving


def test_a_drain_waits_for_the_mark_and_the_open_task_then_tells_the_supervisor_once():
    draining = {n: CoreSettings(node_id=n, drain_timeout_s=30.0) for n in "ab"}
    sim = Sim(["a", "b"], settings=draining)
    leader = sim.until_settled(within_s=3.0)
    place(sim, leader, "p1")
    node_id, runner_id = serving(sim)
    sim.command(node_id, TextGeneration(command_id="t1", owner_node=node_id, params=PARAMS))
    assert isinstance(sim.reply(node_id, "t1"), Routed)
    sim.bus(node_id, ChildLifecycle(child_id="node", supervisor="root", event="restarting", pid=1, restarts=0))
    sim.run(1.0)
    assert node_id in sim.cores[leader].state.restarting and sim.told[node_id] == []  # the task still runs
    sim.command(node_id, TaskFinished(command_id="f1", finished_command_id="t1"))
    sim.run(1.0)
    assert sim.told[node_id] == [AdminVerb.DRAINED]
    sim.run(1.0)
    assert sim.told[node_id] == [AdminVerb.DRAINED]


def test_a_drain_waits_for_the_leader_to_record_the_restart_mark():
    draining = {n: CoreSettings(node_id=n, drain_timeout_s=30.0) for n in "ab"}
    sim = Sim(["a", "b"], settings=draining)
    leader = sim.until_settled(within_s=3.0)
    follower = "b" if leader == "a" else "a"
    sim.command(leader, PlaceInstance(command_id="p1", card=CARD, excluded_nodes=(leader,)))
    node_id, _runner = serving(sim)
    assert node_id == follower
    sim.drop = lambda src, dst, msg: isinstance(msg, LocalEvent) and isinstance(msg.event, NodeRestarting)
    sim.bus(follower, ChildLifecycle(child_id="node", supervisor="root", event="restarting", pid=1, restarts=0))
    sim.run(2.0)  # nothing in flight, but the leader has not recorded the restart: routing may still pick it
    assert follower not in sim.cores[leader].state.restarting and sim.told[follower] == []
    sim.drop = lambda src, dst, msg: False
    sim.run(1.5)  # the mark is sent again every second until the state has it
    assert follower in sim.cores[leader].state.restarting
    assert sim.told[follower] == [AdminVerb.DRAINED]


def test_a_second_restart_while_one_is_pending_is_upstreams_409_and_the_supervisor_is_asked_once():
    sim = Sim(["a", "b"])
    sim.until_settled(within_s=3.0)
    sim.command("a", RestartNode(command_id="r1", node_id="a"))
    sim.command("a", RestartNode(command_id="r2", node_id="a"))
    first, second = sim.reply("a", "r1"), sim.reply("a", "r2")
    assert isinstance(first, CommandAccepted) and first.message == "restarting"
    assert isinstance(second, CommandRejected) and (second.status, second.message) == (409, RESTART_PENDING)
    assert sim.told["a"] == [AdminVerb.RESTART]
    sim.command("a", RestartNode(command_id="r3", node_id="b"))  # passed to b's master
    assert sim.told["b"] == [AdminVerb.RESTART]
    passed = sim.reply("a", "r3")
    assert isinstance(passed, CommandAccepted) and passed.message == "restart_sent"
    sim.command("a", RestartNode(command_id="r4", node_id="zz"))
    assert (sim.reply("a", "r4").status, sim.reply("a", "r4").reason) == (404, RejectReason.UNKNOWN_NODE)


def test_a_drained_message_the_supervisor_could_not_take_is_sent_again():
    core = MasterCore(CoreSettings(node_id="a", drain_timeout_s=5.0), lambda: "x")
    core.boot(Instant(0, 0), wait_s=0)
    core.on_bus(ChildLifecycle(child_id="node", supervisor="root", event="restarting", pid=1, restarts=0),
                Instant(0.1, 0.1))
    told = [e for e in core.tick(Instant(0.2, 0.2)) if isinstance(e, TellSupervisor)]
    assert told == [TellSupervisor(AdminVerb.DRAINED)]
    assert not [e for e in core.tick(Instant(0.3, 0.3)) if isinstance(e, TellSupervisor)]
    core.supervisor_missed(AdminVerb.DRAINED)
    assert [e for e in core.tick(Instant(0.4, 0.4)) if isinstance(e, TellSupervisor)] == told


def test_the_supervisor_link_sends_the_admin_verb_and_says_when_it_could_not():
    import zmq

    from skulk.services.master.restart import SupervisorLink
    from skulk.wire.control import AdminCommand
    from skulk.wire.sockets import recv

    ctx = zmq.Context.instance()
    sup, master_side = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    sup.bind("inproc://supervisor-link")
    master_side.connect("inproc://supervisor-link")
    try:
        assert SupervisorLink(master_side).tell(AdminVerb.RESTART)
        asked = recv(sup)
        assert isinstance(asked, AdminCommand) and asked.verb == "restart"
        lonely = ctx.socket(zmq.PAIR)  # no peer: a NOBLOCK send cannot go
        try:
            assert SupervisorLink(lonely).tell(AdminVerb.DRAINED) is False
        finally:
            lonely.close(0)
    finally:
        sup.close(0)
        master_side.close(0)


def test_a_restart_the_supervisor_could_not_take_is_not_left_pending():
    core = MasterCore(CoreSettings(node_id="a"), lambda: "x")
    core.boot(Instant(0, 0), wait_s=0)
    first = core.on_local([b"api", b"r1"], RestartNode(command_id="r1", node_id="a"), Instant(0.1, 0.1))
    assert TellSupervisor(AdminVerb.RESTART) in first
    core.supervisor_missed(AdminVerb.RESTART)
    again = core.on_local([b"api", b"r2"], RestartNode(command_id="r2", node_id="a"), Instant(0.2, 0.2))
    assert TellSupervisor(AdminVerb.RESTART) in again  # asked again, not a 409


def test_a_restart_the_supervisor_began_itself_is_pending_for_the_api_too():
    """`skulk admin restart` or SIGHUP to the root (no API request): while the node drains, a
    restart asked through the API is the 409, not a second restart (`own_node.Restart`)."""
    core = MasterCore(CoreSettings(node_id="a", drain_timeout_s=5.0), lambda: "x")
    core.boot(Instant(0, 0), wait_s=0)
    core.on_bus(ChildLifecycle(child_id="node", supervisor="root", event="restarting", pid=1, restarts=0),
                Instant(0.1, 0.1))
    out = core.on_local([b"api", b"r1"], RestartNode(command_id="r1", node_id="a"), Instant(0.2, 0.2))
    assert TellSupervisor(AdminVerb.RESTART) not in out
    (answer,) = [e for e in out if isinstance(e, Answer)]
    assert isinstance(answer.message, CommandRejected) and answer.message.status == 409
