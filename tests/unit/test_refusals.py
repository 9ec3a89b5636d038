"""Refused frames: logged once per peer, counted after, summarised per period, bounded."""

from __future__ import annotations

import logging

from skulk.wire import refusals
from skulk.wire.errors import FrameTooLarge, MalformedFrame
from skulk.wire.refusals import Refusals, Verdict

LOG = logging.getLogger("test.refusals")


def test_first_refusal_per_peer_is_logged_and_the_rest_counted():
    r = Refusals("port", LOG, period_s=60)
    assert r.verdict("a", "MalformedFrame", 0.0) is Verdict.LOG
    assert r.verdict("a", "MalformedFrame", 1.0) is Verdict.COUNT
    assert r.verdict("b", "FrameTooLarge", 2.0) is Verdict.LOG
    assert r.verdict("a", "FrameTooLarge", 3.0) is Verdict.COUNT
    assert r.summary(59.0) is None  # not due yet
    line = r.summary(60.0)
    assert line == "port: 2 more bad frame(s) from 1 peer(s) in the last 60s (FrameTooLarge 1, MalformedFrame 1)"
    assert r.summary(200.0) is None  # nothing counted since: no line
    assert r.verdict("a", "MalformedFrame", 201.0) is Verdict.COUNT  # still known: not logged again
    assert r.total == 5


def test_a_flood_of_fresh_peers_logs_at_most_max_first_lines_per_period():
    r = Refusals("port", LOG, period_s=10, max_first=3, max_peers=100)
    verdicts = [r.verdict(f"p{i}", "MalformedFrame", 0.0) for i in range(50)]
    assert verdicts.count(Verdict.LOG) == 3
    assert "47 more bad frame(s) from 47 peer(s)" in r.summary(10.0)
    assert r.verdict("new", "MalformedFrame", 11.0) is Verdict.LOG  # a new period: first lines again


def test_the_peer_table_is_bounded():
    r = Refusals("port", LOG, max_peers=8, max_first=10**6)
    for i in range(10_000):
        r.verdict(f"peer{i}", "MalformedFrame", 0.0)
    assert len(r.peers) == 8 and len(r.counted_peers) <= 8


def test_refuse_writes_one_line_per_peer_and_a_summary(caplog):
    r = Refusals("gossip cluster port", LOG, period_s=5)
    with caplog.at_level(logging.WARNING, logger="test.refusals"):
        for i in range(1000):
            r.refuse("00aa", MalformedFrame("garbage") if i % 2 else FrameTooLarge("big"), now=i / 1000)
        refusals.flush_all(10.0)  # the loop's timer: a burst that stopped is still summarised
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("gossip cluster port: rejected a bad frame from 00aa: big")
    assert "999 more bad frame(s) from 1 peer(s)" in lines[1] and "FrameTooLarge 499, MalformedFrame 500" in lines[1]


def test_peer_of_a_router_envelope():
    assert refusals.peer_of([b"\x00\x01", b""]) == "0001"
    assert refusals.peer_of([]) == ""


def test_a_huge_reason_is_clipped_in_the_log(caplog):
    r = Refusals("runner: requests", LOG)
    with caplog.at_level(logging.WARNING, logger="test.refusals"):
        r.refuse("01", MalformedFrame("x" * 1_000_000), now=0.0)
    assert len(caplog.records[0].getMessage()) < 500 and "(1000000 chars)" in caplog.records[0].getMessage()

