"""The event log's catch-up (pure): state events are recorded once each, in index order, with
what the bus missed asked of the master; what nobody holds is skipped and counted, never waited
on past the timeout."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from skulk.services.eventlog.catchup import ASK_TIMEOUT_S, Ask, CatchUp


def test_in_order_events_are_recorded_as_heard_and_repeats_dropped():
    c: CatchUp[str] = CatchUp()
    assert c.on_event("s", 0, "e0", 0.0).record == ["e0"]
    assert c.on_event("s", 1, "e1", 0.0).record == ["e1"]
    assert c.on_event("s", 1, "e1", 0.0).record == [] and c.on_head("s", 1, 0.0).ask is None


def test_a_late_start_asks_the_master_and_records_the_missed_ones_first():
    c: CatchUp[str] = CatchUp()
    step = c.on_event("s", 3, "e3", 0.0)  # connected after 0..2 were published
    assert step.record == [] and step.ask == Ask("s", -1)
    assert c.on_event("s", 4, "e4", 0.1).record == []  # held while asking
    step = c.on_batch("s", [(0, "e0"), (1, "e1"), (2, "e2"), (3, "e3")], 0.2)
    assert step.record == ["e0", "e1", "e2", "e3", "e4"] and step.ask is None and step.skipped == 0
    assert c.on_event("s", 5, "e5", 0.3).record == ["e5"]


def test_a_restart_resumes_after_what_the_file_holds():
    c: CatchUp[str] = CatchUp("s", 7)
    step = c.on_event("s", 10, "e10", 0.0)
    assert step.ask == Ask("s", 7)
    assert c.on_batch("s", [(8, "e8"), (9, "e9"), (10, "e10")], 0.1).record == ["e8", "e9", "e10"]


def test_a_head_ahead_of_the_log_asks_even_when_no_event_follows():
    c: CatchUp[str] = CatchUp("s", 2)
    step = c.on_head("s", 4, 0.0)
    assert step.ask == Ask("s", 2)
    assert c.on_batch("s", [(3, "e3"), (4, "e4")], 0.1).record == ["e3", "e4"]
    assert c.on_head("s", 4, 1.0).ask is None


def test_a_new_session_starts_over_at_index_zero():
    c: CatchUp[str] = CatchUp("old", 40)
    assert c.on_event("new", 0, "n0", 0.0).record == ["n0"]
    assert c.on_head("new", -1, 0.0).ask is None  # a fresh leader's head before its first event
    step = c.on_event("newer", 2, "m2", 1.0)
    assert step.ask == Ask("newer", -1)


def test_what_the_master_no_longer_holds_is_skipped_and_counted():
    c: CatchUp[str] = CatchUp("s", 1)
    c.on_event("s", 9, "e9", 0.0)
    step = c.on_batch("s", [(6, "e6"), (7, "e7"), (8, "e8"), (9, "e9")], 0.1)  # 2..5 dropped by its ring
    assert step.record == ["e6", "e7", "e8", "e9"] and step.skipped == 4
    c2: CatchUp[str] = CatchUp("s", 1)
    c2.on_head("s", 5, 0.0)  # a follower that adopted a snapshot never published 2..5
    step = c2.on_batch("s", [], 0.1)
    assert step.record == [] and step.skipped == 4 and c2.on_head("s", 5, 1.0).ask is None


def test_no_answer_in_time_records_what_was_held_and_goes_on():
    c: CatchUp[str] = CatchUp("s", 0)
    c.on_event("s", 3, "e3", 0.0)
    assert c.due(ASK_TIMEOUT_S - 0.1).record == []
    step = c.due(ASK_TIMEOUT_S + 0.1)
    assert step.record == ["e3"] and step.skipped == 2
    assert c.on_batch("s", [(1, "e1")], 5.0).record == []  # late: already settled
    assert c.on_event("s", 4, "e4", 5.0).record == ["e4"]


def test_a_partial_answer_asks_for_the_rest():
    c: CatchUp[str] = CatchUp()
    c.on_head("s", 5, 0.0)
    step = c.on_batch("s", [(0, "e0"), (1, "e1")], 0.1)  # one frame's worth
    assert step.record == ["e0", "e1"] and step.ask == Ask("s", 1)
    step = c.on_batch("s", [(2, "e2"), (3, "e3"), (4, "e4"), (5, "e5")], 0.2)
    assert step.record == ["e2", "e3", "e4", "e5"] and step.ask is None


@settings(max_examples=300, deadline=None)
@given(heard=st.lists(st.booleans(), min_size=1, max_size=40), start=st.integers(-1, 5),
       kept_from=st.integers(0, 45), chunk=st.integers(1, 8))
def test_any_loss_on_the_bus_records_each_index_at_most_once_in_order(heard, start, kept_from, chunk):
    """Events 0..n-1, some lost on the bus; the master keeps those from `kept_from` and answers at
    most `chunk` a time. Recorded: strictly increasing, and every event the master kept or the bus
    delivered after the start position."""
    c: CatchUp[int] = CatchUp("s", start)
    recorded: list[int] = []
    now = 0.0

    def run(step) -> None:
        recorded.extend(step.record)
        while step.ask is not None:
            kept = [(i, i) for i in range(max(step.ask.since + 1, kept_from), len(heard))][:chunk]
            step = c.on_batch("s", kept, now)
            recorded.extend(step.record)

    for idx, on_bus in enumerate(heard):
        now += 0.01
        if on_bus:
            run(c.on_event("s", idx, idx, now))
    run(c.on_head("s", len(heard) - 1, now + 0.01))
    assert recorded == sorted(set(recorded)) and all(i > start for i in recorded)
    expected = {i for i in range(start + 1, len(heard)) if i >= kept_from or heard[i]}
    assert expected <= set(recorded) or max(expected, default=-1) <= start
