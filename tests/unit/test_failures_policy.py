"""The leader's give-up policy for instances (pure)."""

from __future__ import annotations

from skulk.services.master.failures import FailureBook, GiveUp, Recreate
from skulk.supervisor import exitcodes
from skulk.supervisor.strategy import should_restart


def test_a_wedge_deletes_at_once():
    book = FailureBook()
    why = book.verdict("i", "Terminated (exit code 86 (warmup deadline overrun, GPU may be wedged))", 0.0)
    assert isinstance(why, GiveUp) and "not retried" in why.reason


def test_a_ring_that_did_not_form_is_recreated_on_new_ports():
    book = FailureBook()
    error = ("rank 0 forming its mx.distributed ring with 127.0.0.1:61001 exceeded its 120s deadline"
             " — a peer rank is down, or its port is unreachable or taken")
    assert book.verdict("i", error, 0.0) == Recreate(0.5)
    assert book.verdict("j", "Terminated (exit code 87 (group connect failed))", 0.0) == Recreate(0.5)


def test_failures_recreate_with_doubling_backoff_then_a_crash_loop_gives_up():
    book = FailureBook()
    assert book.verdict("i", "Terminated (signal 6 (SIGABRT))", 0.0) == Recreate(0.5)
    book.replaced("i", "i2")  # the re-created instance carries the count on
    assert book.verdict("i2", "Terminated (signal 6 (SIGABRT))", 10.0) == Recreate(1.0)
    book.replaced("i2", "i3")
    assert book.verdict("other", "x", 11.0) == Recreate(0.5)
    why = book.verdict("i3", "Terminated (signal 6 (SIGABRT))", 20.0)
    assert isinstance(why, GiveUp) and why.reason.startswith("crash loop: 3 runner failures within 60s")


def test_old_failures_age_out():
    book = FailureBook()
    verdicts = [book.verdict("i", "boom", t) for t in (0.0, 30.0, 61.0, 92.0)]
    assert verdicts == [Recreate(0.5), Recreate(1.0), Recreate(1.0), Recreate(1.0)]
    assert book.verdict("i", "boom", 200.0) == Recreate(0.5)


def test_wedged_and_group_connect_exits_are_never_restarted():
    for code in (exitcodes.WEDGED, exitcodes.GROUP_CONNECT_FAILED):
        assert should_restart("permanent", code) is False and should_restart("transient", code) is False


def test_a_second_restart_while_one_is_pending_is_upstreams_409(tmp_path):
    import zmq

    from skulk.services.master.runner_keeper import RunnerKeeper
    from skulk.wire.commands import RESTART_PENDING, CommandAccepted, CommandRejected
    from skulk.wire.control import AdminCommand
    from skulk.wire.sockets import recv
    from skulk.wire.state import State

    ctx = zmq.Context.instance()
    sup, master_side = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    sup.bind("inproc://keeper-restart")
    master_side.connect("inproc://keeper-restart")
    try:
        keeper = RunnerKeeper(master_side, "n", tmp_path, "127.0.0.1", "127.0.0.1", State)
        first, second = keeper.restart_node("c1"), keeper.restart_node("c2")
        assert isinstance(first, CommandAccepted) and first.message == "restarting"
        assert isinstance(second, CommandRejected) and (second.status, second.message) == (409, RESTART_PENDING)
        asked = recv(sup)
        assert isinstance(asked, AdminCommand) and asked.verb == "restart"
        assert not sup.poll(0)  # asked once only
    finally:
        sup.close(0)
        master_side.close(0)


def test_a_taken_ring_port_fails_at_once_not_at_the_connect_deadline(tmp_path):
    import socket

    import pytest

    from skulk.services.runner.engine import Ring, connect_group

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        ring = Ring(rank=1, hosts=("127.0.0.1:1", f"127.0.0.1:{port}"), sharding="Pipeline",
                    split=(2, 2), hostfile=tmp_path / "hosts.json", connect_deadline_s=60)
        with pytest.raises(RuntimeError, match=f"ring port 127.0.0.1:{port} of rank 1 is taken"):
            connect_group(ring)
