"""The master core as a state machine, with no processes: cores wired by `master_sim.Sim`
(effects delivered as the service and the network would), time advanced by hand."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skulk.cluster.catalog import NodeCatalogUpdated
from skulk.cluster.state import RunnerStatus
from skulk.services.master.core import CoreSettings, MasterCore
from skulk.services.master.effects import Answer, Instant
from skulk.services.master.replication import carried_over
from skulk.wire.cluster import ForwardCommand, ForwardedReply
from skulk.wire.commands import (
    SESSION_CHANGED,
    CommandAccepted,
    CommandRejected,
    RejectReason,
    SnapshotRequest,
    StateSnapshot,
)
from skulk.wire.events import ChildLifecycle, RunnerReport
from tests.unit.builders import CARD, placed
from tests.unit.master_sim import Sim, place, serving

OTHER = replace(CARD, model_id="skulk/other")




def test_a_lone_node_leads_at_its_first_membership_and_places_its_boot_models():
    sim = Sim(["a"], settings={"a": CoreSettings(node_id="a", place=(CARD.model_id,))},
              catalogs={"a": NodeCatalogUpdated(node_id="a", cards=(CARD,))})
    assert sim.leaders() == []  # waits for its node's first membership
    sim.step()
    assert sim.leaders() == ["a"]
    sim.run(1.0)
    state = sim.cores["a"].state
    assert [i.model_id for i in state.instances.values()] == [CARD.model_id]
    assert any(env is None and isinstance(m, CommandAccepted) for env, m in sim.answers["a"])


def test_three_nodes_elect_one_leader_and_every_state_follows_it():
    sim = Sim(["a", "b", "c"])
    leader = sim.until_settled(within_s=3.0)
    follower = next(n for n in "abc" if n != leader)
    place(sim, follower, "p1")
    assert isinstance(sim.reply(follower, "p1"), CommandAccepted)
    assert sim.until_settled() == leader
    assert all(len(sim.cores[n].state.instances) == 1 for n in "abc")
    assert sim.cores[leader].election.seniority == 3  # both followers asked it for the state


def test_a_forwarded_command_whose_reply_is_lost_is_resent_and_applied_once():
    sim = Sim(["a", "b"])
    leader = sim.until_settled(within_s=3.0)
    follower = "b" if leader == "a" else "a"
    lost = []

    def drop(src, dst, msg):
        if isinstance(msg, ForwardedReply) and not lost:
            lost.append(msg)
            return True
        return False

    sim.drop = drop
    place(sim, follower, "p1")
    assert lost and sim.reply(follower, "p1") is None  # held: the reply was lost
    sim.run(1.0)  # re-forwarded at the announce pace; the leader answers from its reply cache
    assert isinstance(sim.reply(follower, "p1"), CommandAccepted)
    assert len(sim.cores[leader].state.instances) == 1


def test_a_leader_lost_mid_command_fails_the_apis_command_and_keeps_the_masters_own():
    sim = Sim(["a", "b", "c"], settings={"a": CoreSettings(node_id="a", place=(OTHER.model_id,))},
              catalogs={"c": NodeCatalogUpdated(node_id="c", cards=(OTHER,))},
              drop=lambda src, dst, msg: isinstance(msg, ForwardCommand))  # the leader never gets them
    leader = sim.until_settled(within_s=3.0)
    assert leader == "c"  # the highest id among equals
    follower = "a"  # its `--place` of OTHER (no API waits on it) is held, the leader never hearing it
    sim.step()  # its next membership: the catalog has OTHER now
    place(sim, follower, "api")
    core = sim.cores[follower]
    assert "api" in core.s.desk.held and len(core.s.desk.held) == 2
    sim.kill(leader)
    sim.drop = lambda src, dst, msg: False
    sim.step()
    rejected = sim.reply(follower, "api")
    assert isinstance(rejected, CommandRejected) and (rejected.status, rejected.message) == (503, SESSION_CHANGED)
    new = sim.until_settled()
    assert new != leader
    sim.run(1.0)
    assert [i.model_id for i in sim.cores[new].state.instances.values()] == [OTHER.model_id]


def test_a_command_held_with_no_leader_answers_503_at_its_deadline():
    slow = {n: CoreSettings(node_id=n, election_timeout_s=10.0) for n in "ab"}
    sim = Sim(["a", "b"], settings=slow)
    leader = sim.until_settled(within_s=12.0)
    follower = "b" if leader == "a" else "a"
    sim.kill(leader)
    sim.step()  # the campaign begins: alone, it waits out the whole timeout
    place(sim, follower, "p1")
    sim.run(3.9)
    assert sim.reply(follower, "p1") is None
    sim.run(0.2)
    reply = sim.reply(follower, "p1")
    assert isinstance(reply, CommandRejected) and (reply.status, reply.reason) == (503, RejectReason.NO_LEADER)


def test_two_lone_leaders_meeting_keep_one_session_and_lose_no_placement():
    sim = Sim(["a", "b"])
    sim.partition({"a"}, {"b"})
    sim.run(0.3)
    assert sim.leaders() == ["a", "b"]
    place(sim, "a", "a1")
    place(sim, "a", "a2", card=OTHER)  # a executed more: it wins the meeting
    place(sim, "b", "b1", card=replace(CARD, model_id="skulk/third"))
    sim.heal()
    assert sim.until_settled() == "a"
    sim.run(1.0)
    models = sorted(i.model_id for i in sim.cores["a"].state.instances.values())
    assert models == sorted([CARD.model_id, OTHER.model_id, "skulk/third"])  # b's re-submitted to a
    assert sim.settled() == "a"


def test_a_restarted_node_with_saved_state_follows_the_leader_elected_meanwhile():
    sim = Sim(["a", "b", "c"])
    leader = sim.until_settled(within_s=3.0)
    place(sim, leader, "p1")
    sim.bus(leader, ChildLifecycle(child_id="node", supervisor="root", event="restarting", pid=1, restarts=0))
    sim.run(0.3)  # an in-place restart: the mark keeps the node and its instances while it is away
    saved = sim.cores[leader].state
    sim.kill(leader)
    new = sim.until_settled(set("abc") - {leader})
    sim.start(leader, saved=carried_over(saved, leader, age_s=1.0))
    assert sim.until_settled() == new  # its file (index -1) never outranks the live nodes
    assert all(len(sim.cores[n].state.instances) == 1 for n in "abc")
    assert leader not in sim.cores[new].state.restarting  # its new image cleared the mark


def test_a_lone_node_restarted_in_place_keeps_its_instances():
    sim = Sim(["a"])
    sim.run(0.2)
    place(sim, "a", "p1")
    saved = sim.cores["a"].state
    sim.kill("a")
    sim.start("a", saved=carried_over(saved, "a", age_s=1.0))
    sim.run(0.2)
    assert sim.leaders() == ["a"] and len(sim.cores["a"].state.instances) == 1


def test_a_node_restarted_alone_leads_at_boot_and_one_with_peers_waits_for_its_membership():
    """A lone node's saved state names no one else: nobody to wait for, it leads at once (its
    runners start 1.5 s sooner than after gossip's first membership). A state that names peers
    waits to see who is still there."""
    sim = Sim(["a"])
    sim.run(0.2)
    place(sim, "a", "p1")
    lone = carried_over(sim.cores["a"].state, "a", age_s=1.0)
    core = MasterCore(CoreSettings(node_id="a"), lambda: "x", saved=lone)
    core.boot(Instant(0, 0))
    assert core.election.is_leader and len(core.state.instances) == 1
    sim = Sim(["a", "b"])
    leader = sim.until_settled(within_s=3.0)
    place(sim, leader, "p1")
    with_peers = carried_over(sim.cores[leader].state, leader, age_s=1.0)
    core = MasterCore(CoreSettings(node_id=leader), lambda: "x", saved=with_peers)
    core.boot(Instant(0, 0))
    assert not core.election.is_leader and core.election.booting_until is not None






def test_a_failed_runner_deletes_its_instance_and_the_leader_recreates_it_after_the_backoff():
    sim = Sim(["a", "b"])
    leader = sim.until_settled(within_s=3.0)
    place(sim, leader, "p1")
    node_id, runner_id = serving(sim)
    old = next(iter(sim.cores[leader].state.instances))
    sim.bus(node_id, RunnerReport(runner_id=runner_id, instance_id=old,
                                  status=RunnerStatus(kind="RunnerFailed", error_message="boom", exit_code=1)))
    sim.step()
    note = sim.cores[leader].state.deleted[old]
    assert old not in sim.cores[leader].state.instances and note.cause == "runner_failed"
    assert note.recreate_at == pytest.approx(sim.now().wall - 0.1 + 0.5)  # the first back-off
    sim.run(0.6)
    (new_id, new), = sim.cores[leader].state.instances.items()
    assert new_id != old and new.model_id == CARD.model_id
    assert sim.until_settled() == leader and all(new_id in sim.cores[n].state.instances for n in "ab")






OPS = st.one_of(
    st.tuples(st.just("split"), st.lists(st.sampled_from("abcd"), min_size=1, max_size=3, unique=True)),
    st.tuples(st.just("heal"), st.none()),
    st.tuples(st.just("kill"), st.sampled_from("abcd")),
    st.tuples(st.just("start"), st.sampled_from("abcd")),
    st.tuples(st.just("thaw"), st.sampled_from("abcd")),  # a stopped process resumes, state and all
    st.tuples(st.just("run"), st.integers(min_value=1, max_value=40)),
    st.tuples(st.just("place"), st.sampled_from("abcd")),
    st.tuples(st.just("lossy"), st.integers(min_value=0, max_value=2**32 - 1)),  # the network drops a third
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=12))
def test_any_membership_churn_keeps_one_leader_per_session_and_ends_with_one_leader(ops):
    sim = Sim(list("abcd"))
    placed = 0
    for op, arg in ops:
        if op == "lossy":
            rng = random.Random(arg)
            sim.drop = lambda src, dst, msg, rng=rng: rng.random() < 0.33
        elif op == "split":
            sim.partition(set(arg), set("abcd") - set(arg))
        elif op == "heal":
            sim.heal()
        elif op == "kill":
            sim.kill(arg)
        elif op == "start" and arg not in sim.alive:
            sim.start(arg)
        elif op == "thaw":
            sim.thaw(arg)
        elif op == "run":
            for _ in range(arg):
                sim.step()
                sessions = [sim.cores[n].election.session for n in sim.leaders()]
                assert len(sessions) == len(set(sessions)), "two leaders of one session"
        elif op == "place" and arg in sim.alive:
            placed += 1
            place(sim, arg, f"p{placed}", card=replace(CARD, model_id=f"m/{placed}"))
    sim.heal()
    sim.drop = lambda src, dst, msg: False
    for name in "abcd":
        if name not in sim.alive:
            sim.start(name)
    leader = sim.until_settled(within_s=30.0)  # every state equal to the leader's
    assert sim.leaders() == [leader]


def test_a_node_back_from_a_freeze_never_takes_a_reopened_session_for_the_one_it_had():
    """A leader that won again at a clock it had led at once opened the same session id; a
    follower frozen across that kept its longer copy and skipped the new events as old ones."""
    sim = Sim(list("abcd"))
    sim.partition({"b", "c"}, {"a", "d"})
    sim.run(1.0)
    for n in range(3):
        place(sim, "c", f"c{n}", card=replace(CARD, model_id=f"m/c{n}"))
    for n in range(4):
        place(sim, "d", f"d{n}", card=replace(CARD, model_id=f"m/d{n}"))
    sim.run(0.5)
    sim.kill("b")  # stopped, not killed: it keeps its state and session
    sim.heal()
    sim.run(1.0)
    sim.kill("d")
    sim.start("d")
    sim.until_settled({"a", "c", "d"})
    sim.thaw("b")
    leader = sim.until_settled(within_s=10.0)
    assert sim.cores["b"].state == sim.cores[leader].state








def test_a_snapshot_request_is_answered_by_this_nodes_master_with_the_whole_state():
    """The API's replica asks its own master (leader or not): `core.command` answers it."""
    core = MasterCore(CoreSettings(node_id="a"), lambda: "x", saved=placed()[0])
    core.boot(Instant(0, 0), wait_s=0)
    out = core.on_local([b"api", b"s"], SnapshotRequest(command_id="s"), Instant(0.1, 0.1))
    (answer,) = [e for e in out if isinstance(e, Answer)]
    assert isinstance(answer.message, StateSnapshot) and answer.message.state == core.state
