"""The leader's recovery of failed runners (pure): give-up policy, back-off, lineage, and
re-creations kept in the replicated state so that any leader makes them."""

from __future__ import annotations

from dataclasses import replace

from skulk.cluster.placement import GIB
from skulk.cluster.reducer import DELETIONS_KEPT
from skulk.cluster.state import (
    InstanceCreated,
    InstanceDeleted,
    NodeGatheredInfo,
    NodeRestarting,
    NodeTimedOut,
    RecreationAbandoned,
    RunnerStatus,
    State,
    Task,
    TaskCreated,
)
from skulk.node import exitcodes
from skulk.services.master.commands import handle, node_lost_events
from skulk.services.master.recovery import (
    GiveUp,
    OtherEngine,
    RecoveryPolicy,
    Recreate,
    lineage_failures,
    next_recreation,
    process_ended,
    runner_failed,
    verdict,
)
from skulk.services.master.roster import Roster, lost_nodes
from skulk.supervisor.strategy import should_restart
from skulk.wire.cluster import Member
from skulk.wire.codec import decode, encode
from skulk.wire.commands import INSTANCE_LOST, PlaceInstance
from skulk.wire.events import ChildLifecycle
from tests.unit.builders import CARD, PARAMS, base, ids, node, placed, run

POLICY = RecoveryPolicy()
MEMBER = Member(info=node(), master_endpoint="tcp://127.0.0.1:1")


def failed(message: str, exit_code: int | None = None, orderly: bool = False) -> RunnerStatus:
    return RunnerStatus(kind="RunnerFailed", error_message=message, exit_code=exit_code, orderly=orderly)


ABORT = failed("Terminated (signal 6 (SIGABRT))", -6)


def test_a_wedge_deletes_at_once_decided_on_the_exit_code_not_the_text():
    why = verdict(failed("Terminated (exit code 86 (warmup deadline overrun, GPU may be wedged))",
                         exitcodes.WEDGED),
                  [], 0.0, POLICY)
    assert isinstance(why, GiveUp) and "not retried" in why.reason
    assert verdict(failed("the GPU may be wedged, exit code 86", None), [], 0.0, POLICY) == Recreate(0.5)


def test_a_ring_that_did_not_form_is_recreated_on_new_ports():
    error = ("rank 0 forming its mx.distributed ring with 127.0.0.1:61001 exceeded its 120s deadline"
             " — a peer rank is down, or its port is unreachable or taken")
    assert verdict(failed(error, exitcodes.GROUP_CONNECT_FAILED), [], 0.0, POLICY) == Recreate(0.5)


REFUSED = failed("llama_cpp cannot run m: llama.cpp cannot load model.gguf of m (a damaged file)",
                 exitcodes.ENGINE_REFUSED)


def test_an_engine_that_refuses_the_checkpoint_gives_way_to_another_decided_on_the_exit_code():
    assert verdict(REFUSED, [], 0.0, POLICY, "llama_cpp", ("mlx", "llama_cpp")) == OtherEngine("llama_cpp")
    why = verdict(REFUSED, [], 0.0, POLICY, "llama_cpp", ("llama_cpp",))
    assert isinstance(why, GiveUp) and why.reason.startswith("no other engine can run it: llama_cpp cannot run m")
    assert verdict(failed(REFUSED.error_message), [], 0.0, POLICY, "llama_cpp", ("mlx", "llama_cpp")) == Recreate(0.5)


def test_a_refused_engine_is_placed_again_at_once_on_the_other_engine_and_stays_off_its_lineage():
    gguf_node = replace(node(), engines=("mlx", "llama_cpp"))  # a CPU node: auto picks llama.cpp
    card = replace(CARD, engines=("mlx", "llama_cpp"), gguf_bytes=CARD.storage_size_bytes // 4)
    state = run(State(session="s"), [NodeGatheredInfo(info=gguf_node)])
    state = run(state, handle(state, PlaceInstance(command_id="c1", card=card), ids(), 0.0).events)
    ((iid, inst),) = state.instances.items()
    assert inst.engine == "llama_cpp"
    (rid,) = inst.runner_to_shard
    gone = run(state, runner_failed(state, rid, REFUSED, 100.0, POLICY))
    note = gone.deleted[iid]
    assert (note.cause, note.recreate_at, note.refused_engine) == ("engine_refused", 100.0, "llama_cpp")
    assert decode(encode(gone)) == gone
    (made,) = next_recreation(gone, 100.0, ids(), POLICY)  # at once: no back-off
    assert isinstance(made, InstanceCreated) and made.replaces == iid
    assert made.instance.engine == "mlx" and made.instance.card.engines == ("mlx",)
    again = run(gone, [made])
    (new_rid,) = again.instances[made.instance.instance_id].runner_to_shard
    crash = run(again, runner_failed(again, new_rid, ABORT, 110.0, POLICY))
    (third,) = next_recreation(crash, 111.0, ids(), POLICY)  # a later crash re-creates on MLX still
    assert third.instance.engine == "mlx"
    refused_too = run(again, runner_failed(again, new_rid, REFUSED, 110.0, POLICY)).deleted[made.instance.instance_id]
    assert refused_too.cause == "given_up" and "no other engine can run it" in refused_too.reason


def test_backoff_doubles_and_the_third_failure_in_the_window_gives_up():
    assert verdict(ABORT, [], 0.0, POLICY) == Recreate(0.5)
    assert verdict(ABORT, [0.0], 10.0, POLICY) == Recreate(1.0)
    assert verdict(ABORT, [0.0], 10.0, RecoveryPolicy(backoff_s=4.0)) == Recreate(8.0)
    why = verdict(ABORT, [0.0, 10.0], 20.0, POLICY)
    assert isinstance(why, GiveUp) and why.reason.startswith("crash loop: 3 runner failures within 60s")


def test_old_failures_age_out():
    assert verdict(failed("boom"), [0.0, 30.0], 61.0, POLICY) == Recreate(1.0)
    assert verdict(failed("boom"), [0.0, 30.0], 200.0, POLICY) == Recreate(0.5)


def test_a_failed_runner_deletes_its_instance_and_the_note_keeps_the_recreation():
    state, iid, rid = placed()
    state = run(state, [TaskCreated(task=Task(task_id="t", command_id="c", instance_id=iid,
                                              status="Running", owner_node="n1", params=PARAMS))])
    events = runner_failed(state, rid, ABORT, 100.0, POLICY)
    gone = run(state, events)
    note = gone.deleted[iid]
    task = gone.tasks["t"]
    assert gone.instances == {} and (task.status, task.error_type) == ("Failed", "runner_failed")
    assert task.error_message == f"Runner shutdown before completing command ({note.reason})"
    assert (note.cause, note.recreate_at, note.instance) == ("runner_failed", 100.5, state.instances[iid])
    assert "re-creating in 0.5s" in note.reason
    assert decode(encode(gone)) == gone  # the pending re-creation travels in snapshots
    assert runner_failed(gone, rid, ABORT, 101.0, POLICY) == []  # no instance left: nothing to do


def test_any_leader_makes_a_due_recreation_once_and_the_lineage_counts_on():
    state, iid, rid = placed()
    gone = run(state, runner_failed(state, rid, ABORT, 100.0, POLICY))
    assert next_recreation(gone, 100.4, ids(), POLICY) == []  # not due yet
    (created,) = next_recreation(gone, 100.5, ids(), POLICY)  # e.g. a new leader, from the replica
    assert isinstance(created, InstanceCreated) and created.replaces == iid
    again = run(gone, [created])
    new_id = created.instance.instance_id
    assert again.deleted[iid].replaced_by == new_id and again.deleted[iid].instance is None
    assert next_recreation(again, 200.0, ids(), POLICY) == []  # made once
    assert lineage_failures(again, new_id) == [100.0]
    (new_rid,) = again.instances[new_id].runner_to_shard
    second = run(again, runner_failed(again, new_rid, ABORT, 110.0, POLICY))
    assert second.deleted[new_id].recreate_at == 111.0  # back-off doubled: the count carried on
    (third,) = next_recreation(second, 111.0, ids(), POLICY)
    third_state = run(second, [third])
    assert lineage_failures(third_state, third.instance.instance_id) == [100.0, 110.0]
    (third_rid,) = third_state.instances[third.instance.instance_id].runner_to_shard
    final = run(third_state, runner_failed(third_state, third_rid, ABORT, 120.0, POLICY))
    note = final.deleted[third.instance.instance_id]
    assert note.cause == "given_up" and note.instance is None and "crash loop" in note.reason
    assert next_recreation(final, 500.0, ids(), POLICY) == []


def test_a_refused_recreation_is_tried_again_until_the_window_passes_then_abandoned():
    state, iid, rid = placed()
    gone = run(state, runner_failed(state, rid, ABORT, 100.0, POLICY))
    full = replace(gone, nodes={n: replace(i, ram_available=0) for n, i in gone.nodes.items()})
    assert next_recreation(full, 101.0, ids(), POLICY) == []  # a later memory reading may fit
    no_info = replace(gone, nodes={})  # a new leader still gathering node info
    assert next_recreation(no_info, 101.0, ids(), POLICY) == []
    (late,) = next_recreation(full, 100.5 + 61, ids(), POLICY)
    assert isinstance(late, RecreationAbandoned) and late.reason.startswith("No candidate cycle fits")
    note = run(gone, [late]).deleted[iid]
    assert note.cause == "given_up" and note.instance is None and "; not re-created: No candidate" in note.reason
    assert next_recreation(run(gone, [late]), 200.0, ids(), POLICY) == []
    (made,) = next_recreation(gone, 100.5 + 600, ids(), POLICY)  # placeable: made, however late
    assert isinstance(made, InstanceCreated)


def test_a_pending_recreation_outlives_the_trimming_of_old_notes():
    state, iid, rid = placed()
    gone = run(state, runner_failed(state, rid, ABORT, 100.0, POLICY))
    for n in range(DELETIONS_KEPT + 5):  # many other deletions within the back-off
        other, other_id, _ = placed(gone)
        gone = run(other, [InstanceDeleted(instance_id=other_id, reason="x", when=100.0 + n / 100)])
    assert len(gone.deleted) == DELETIONS_KEPT + 1 and gone.deleted[iid].instance is not None
    (created,) = next_recreation(gone, 101.0, ids(), POLICY)
    assert isinstance(created, InstanceCreated) and created.replaces == iid


def test_a_lost_node_fails_its_tasks_as_instance_lost_before_it_is_removed():
    state, iid, _ = placed()
    state = run(state, [TaskCreated(task=Task(task_id="t", command_id="c", instance_id=iid,
                                              status="Running", owner_node="n1", params=PARAMS))])
    events = node_lost_events(state, "n1", 7.0)
    assert [type(e).__name__ for e in events] == ["TaskFailed", "NodeTimedOut"]
    assert (events[0].error_type, events[0].error_message) == ("instance_lost", INSTANCE_LOST)
    assert node_lost_events(state, "elsewhere", 7.0) == [NodeTimedOut(node_id="elsewhere", when=7.0)]
    gone = run(state, events)
    assert gone.instances == {} and gone.tasks == {} and gone.deleted[iid].cause == "node_lost"


def test_a_lost_nodes_instance_is_placed_again_on_a_survivor_after_the_back_off_and_stays_there():
    state, iid, _ = placed(run(base(), [NodeGatheredInfo(info=node("n2", available=4 * GIB))]))
    assert state.instances[iid].node_to_runner.keys() == {"n1"}  # the roomier node
    gone = run(state, node_lost_events(state, "n1", 100.0, replace_after_s=2.0))
    note = gone.deleted[iid]
    assert (note.cause, note.recreate_at, note.instance) == ("node_lost", 102.0, state.instances[iid])
    assert note.reason == "lost with node n1 (timed out); placing it again in 2s"
    assert decode(encode(gone)) == gone  # a leader elected during the back-off makes it
    assert next_recreation(gone, 101.9, ids(), POLICY) == []
    (made,) = next_recreation(gone, 102.0, ids(), POLICY)
    assert isinstance(made, InstanceCreated) and made.replaces == iid
    assert made.instance.node_to_runner.keys() == {"n2"} and made.instance.model_id == CARD.model_id
    back = run(run(gone, [made]), [NodeGatheredInfo(info=node())])  # n1 returns: nothing moves back
    assert next_recreation(back, 500.0, ids(), POLICY) == []
    assert [i.node_to_runner.keys() for i in back.instances.values()] == [{"n2"}]
    off = run(state, node_lost_events(state, "n1", 100.0))  # placement.replace_lost: false
    assert off.deleted[iid].instance is None and next_recreation(off, 500.0, ids(), POLICY) == []


def test_a_lost_replica_comes_back_on_a_node_that_serves_none_where_one_fits():
    """Two replicas on n1 and n2 of three nodes; n1 lost: its replica goes to n3 (which serves
    none), though n2 is roomier; with only n2 left, it goes there rather than nowhere."""
    three = run(base(), [NodeGatheredInfo(info=node("n2", available=14 * GIB)),
                         NodeGatheredInfo(info=node("n3", available=4 * GIB))])
    first = run(three, handle(three, PlaceInstance(command_id="a", card=CARD, excluded_nodes=("n2", "n3")),
                              ids(), 0.0).events)
    both = run(first, handle(first, PlaceInstance(command_id="b", card=CARD, excluded_nodes=("n1", "n3")),
                             ids(), 0.0).events)
    (lost,) = [i for i, inst in both.instances.items() if inst.node_to_runner.keys() == {"n1"}]
    gone = run(both, node_lost_events(both, "n1", 100.0, replace_after_s=2.0))
    (made,) = next_recreation(gone, 102.0, ids(), POLICY)
    assert isinstance(made, InstanceCreated) and made.replaces == lost
    assert made.instance.node_to_runner.keys() == {"n3"}
    crowded = run(gone, [NodeTimedOut(node_id="n3", when=101.0)])
    (doubled,) = next_recreation(crowded, 102.0, ids(), POLICY)
    assert isinstance(doubled, InstanceCreated) and doubled.instance.node_to_runner.keys() == {"n2"}


def test_a_lost_ring_takes_the_next_narrower_width_that_fits_on_the_nodes_that_remain():
    two = run(base(), [NodeGatheredInfo(info=node("n2"))])
    out = handle(two, PlaceInstance(command_id="c1", card=CARD, min_nodes=2), ids(), 0.0)
    state = run(two, out.events)
    ((iid, inst),) = state.instances.items()
    assert len(inst.node_to_runner) == 2
    gone = run(state, node_lost_events(state, "n2", 100.0, replace_after_s=2.0))
    (made,) = next_recreation(gone, 102.0, ids(), POLICY)
    assert isinstance(made, InstanceCreated) and made.instance.node_to_runner.keys() == {"n1"}
    nothing = run(gone, [NodeTimedOut(node_id="n1", when=101.0)])  # nowhere left: given up after the window
    assert next_recreation(nothing, 102.0 + 30, ids(), POLICY) == []
    (abandoned,) = next_recreation(nothing, 102.0 + 61, ids(), POLICY)
    assert isinstance(abandoned, RecreationAbandoned)


def test_a_rank_that_lost_its_peer_deletes_at_once_and_the_peers_later_report_names_the_cause():
    two = run(base(), [NodeGatheredInfo(info=node("n2"))])
    state = run(two, handle(two, PlaceInstance(command_id="c1", card=CARD, min_nodes=2), ids(), 0.0).events)
    ((iid, inst),) = state.instances.items()
    rank0, rank1 = sorted(inst.runner_to_shard, key=lambda r: inst.runner_to_shard[r].device_rank)
    echo = failed("Terminated (exit code 89 (a peer rank is gone): rank step 8 could not reach rank1)",
                  exitcodes.PEER_LOST)
    killed = failed("Terminated (signal 9 (SIGKILL))", -9)
    gone = run(state, runner_failed(state, rank0, echo, 100.0, POLICY))  # the echo came first
    note = gone.deleted[iid]
    assert gone.instances == {} and note.awaiting_cause == (rank1,) and note.recreate_at == 100.5
    assert decode(encode(gone)) == gone
    assert runner_failed(gone, rank0, echo, 100.1, POLICY) == []  # the echo again: nothing
    (found,) = runner_failed(gone, rank1, killed, 100.1, POLICY)
    traced = run(gone, [found]).deleted[iid]
    assert traced.reason.startswith(f"runner {rank1} failed (Terminated (signal 9 (SIGKILL))); its peer rank")
    assert traced.reason.endswith(note.reason) and "re-creating in 0.5s" in traced.reason
    assert (traced.awaiting_cause, traced.recreate_at, traced.instance) == ((), 100.5, inst)  # counted once
    assert runner_failed(run(gone, [found]), rank1, killed, 100.2, POLICY) == []
    first = run(state, runner_failed(state, rank1, killed, 100.0, POLICY))  # the cause came first
    assert first.deleted[iid].awaiting_cause == () and runner_failed(first, rank0, echo, 100.1, POLICY) == []
    both_echo = runner_failed(gone, rank1, replace(echo, error_message="out of step"), 100.1, POLICY)
    assert both_echo == []  # a second echo is no cause: the note stays as it is
    wedged = failed("Terminated (exit code 86 (warmup deadline overrun, GPU may be wedged))", exitcodes.WEDGED)
    after_wedge = run(gone, runner_failed(gone, rank1, wedged, 100.1, POLICY))
    ruled_out = after_wedge.deleted[iid]
    assert (ruled_out.cause, ruled_out.instance) == ("given_up", None)  # the cause's verdict: never retried
    assert ruled_out.reason.startswith(f"runner {rank1} failed (Terminated (exit code 86")
    assert "not retried" in ruled_out.reason and next_recreation(after_wedge, 101.0, ids(), POLICY) == []


def test_a_node_restarting_in_place_is_kept_with_its_instances_until_its_grace_ends():
    state, iid, _ = placed()
    here = {"n1": MEMBER}
    assert lost_nodes(state, here, 100.0) == [] and lost_nodes(state, {}, 100.0) == ["n1"]
    restarting = run(state, [NodeRestarting(node_id="n1", until=130.0)])
    assert lost_nodes(restarting, {}, 129.9) == []  # gossip lost it: it is restarting
    assert lost_nodes(restarting, {}, 130.1) == ["n1"]  # it did not come back in time
    gone = run(restarting, node_lost_events(restarting, "n1", 130.1))
    assert gone.restarting == {} and gone.instances == {} and iid in gone.deleted


def test_the_roster_keeps_a_restarting_node_then_its_mark_is_cleared_when_it_is_back():
    state, _, _ = placed()
    state = run(state, [NodeRestarting(node_id="n1", until=130.0)])
    roster = Roster(members={}, info_sent={"n1": 0.0})
    assert roster.events(state, 2.0, 101.0) == []  # away, within its grace: kept
    assert [type(e).__name__ for e in roster.events(state, 3.0, 131.0)] == ["NodeTimedOut"]
    back = run(state, [NodeRestarting(node_id="n1", until=0.0)])  # its new image says so
    assert back.restarting == {} and [type(e).__name__ for e in roster.events(back, 4.0, 102.0)] == ["NodeTimedOut"]
    roster.members = {"n1": MEMBER}
    assert [type(e).__name__ for e in roster.events(back, 20.0, 120.0)] == ["NodeGatheredInfo"]  # refresh


def test_a_runner_its_own_node_stopped_is_not_a_failure_and_an_exit_keeps_its_code():
    state, iid, rid = placed()
    stopped = process_ended(ChildLifecycle(child_id=rid, supervisor="runners", event="stopped", pid=1,
                                           restarts=0, detail="signal 15 (SIGTERM)", exit_code=-15), "n1")
    assert stopped is not None and stopped.orderly and runner_failed(state, rid, stopped, 1.0, POLICY) == []
    wedged = process_ended(ChildLifecycle(child_id=rid, supervisor="runners", event="exited", pid=1,
                                          restarts=0, detail="exit code 86", exit_code=exitcodes.WEDGED), "n1")
    assert wedged is not None and (wedged.exit_code, wedged.orderly) == (exitcodes.WEDGED, False)
    assert isinstance(verdict(wedged, [], 0.0, POLICY), GiveUp)


def test_wedged_group_connect_and_engine_refused_exits_are_never_restarted():
    for code in (exitcodes.WEDGED, exitcodes.GROUP_CONNECT_FAILED, exitcodes.ENGINE_REFUSED):
        assert should_restart("permanent", code) is False and should_restart("transient", code) is False


def test_a_taken_ring_port_fails_at_once_not_at_the_connect_deadline(tmp_path):
    import socket

    import pytest

    from skulk.services.runner.ring import Ring, connect_group

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        ring = Ring(rank=1, hosts=("127.0.0.1:1", f"127.0.0.1:{port}"), sharding="Pipeline",
                    split=(2, 2), hostfile=tmp_path / "hosts.json", connect_deadline_s=60)
        with pytest.raises(RuntimeError, match=f"ring port 127.0.0.1:{port} of rank 1 is taken"):
            connect_group(ring)


def test_a_member_that_took_another_name_is_gathered_again_at_once():
    """A node given no name took its derived name: the state shows it within the next
    membership, not at the 10 s refresh."""
    state, _, _ = placed()
    roster = Roster(members={"n1": MEMBER}, info_sent={"n1": 5.0})
    assert roster.events(state, 6.0, 101.0) == []  # listed, same name, refreshed 1 s ago
    renamed = Member(info=replace(MEMBER.info, friendly_name="vm-1a2b"), master_endpoint=MEMBER.master_endpoint)
    roster.members = {"n1": renamed}
    (event,) = roster.events(state, 6.5, 101.5)
    assert isinstance(event, NodeGatheredInfo) and event.info.friendly_name == "vm-1a2b"
