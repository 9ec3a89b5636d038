"""The leader's give-up policy for instances (pure)."""

from __future__ import annotations

from skulk.services.master.failures import FailureBook
from skulk.supervisor import exitcodes
from skulk.supervisor.strategy import should_restart


def test_a_wedge_deletes_at_once():
    book = FailureBook()
    why = book.verdict("i", "Terminated (exit code 86 (warmup deadline overrun, GPU may be wedged))", 0.0)
    assert why and "not retried" in why


def test_three_failures_in_sixty_seconds_is_a_crash_loop():
    book = FailureBook()
    assert book.verdict("i", "Terminated (signal 6 (SIGABRT))", 0.0) is None
    assert book.verdict("i", "Terminated (signal 6 (SIGABRT))", 10.0) is None
    assert book.verdict("other", "x", 11.0) is None
    why = book.verdict("i", "Terminated (signal 6 (SIGABRT))", 20.0)
    assert why and why.startswith("crash loop: 3 runner failures within 60s")


def test_old_failures_age_out():
    book = FailureBook()
    for t in (0.0, 30.0, 61.0, 92.0):
        assert book.verdict("i", "boom", t) is None


def test_wedged_and_group_connect_exits_are_never_restarted():
    for code in (exitcodes.WEDGED, exitcodes.GROUP_CONNECT_FAILED):
        assert should_restart("permanent", code) is False and should_restart("transient", code) is False
