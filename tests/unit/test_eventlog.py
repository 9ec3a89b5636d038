"""The event log's retention (pure) and its files: compaction, archives, counting-only at the
floor or on a write error and back, torn tails."""

from __future__ import annotations

import errno
import gzip
import json
import shutil
from collections import namedtuple

from skulk.node.eventlog_files import log_files, read_records, record_bytes
from skulk.services.eventlog import segment as seg
from skulk.services.eventlog.retention import Retention, archives_to_prune, worth_recording
from skulk.services.eventlog.segment import Segment

Usage = namedtuple("Usage", "total used free")
SMALL = Retention(ring_bytes=2000, ring_keep=10, ring_check_every=5, archives_max=2, archives_bytes=10_000,
                  floor_bytes=1000, floor_check_every=3)


def test_state_changes_are_recorded_heartbeats_are_not():
    seen: set[str] = set()
    assert worth_recording(b"evt.state.event.instance_created", seen)
    assert worth_recording(b"evt.supervisor.runner-1", seen)
    for periodic in (b"evt.service.gossip", b"evt.cluster.membership", b"evt.runner.r1", b"evt.state.head",
                     b"evt.catalog.models", b"evt.download.m"):
        assert not worth_recording(periodic, seen)
    info = b"evt.state.event.node_gathered_info"
    assert worth_recording(info, seen, "n1") and not worth_recording(info, seen, "n1")  # every 10 s
    assert worth_recording(info, seen, "n2")


def test_the_spelled_topics_above_are_the_declared_ones():
    """The test above spells topics as raw frames carry them; the code derives them from
    `wire/topics.py`: both must agree, and every state event's topic is under `STATE_EVENTS`."""
    from skulk.cluster.state import EVENT_TYPES, NodeGatheredInfo
    from skulk.wire.topics import ALL_TOPICS, EVERY_EVENT, STATE_EVENTS, state_event_topic

    assert STATE_EVENTS == b"evt.state.event." and EVERY_EVENT == b"evt."
    assert state_event_topic(NodeGatheredInfo) == b"evt.state.event.node_gathered_info"
    assert all(t.prefix.startswith(EVERY_EVENT) for t in ALL_TOPICS)
    assert all(state_event_topic(e).startswith(STATE_EVENTS) for e in EVENT_TYPES)


def test_archives_are_pruned_oldest_first_by_count_and_by_bytes():
    keep = Retention(archives_max=2, archives_bytes=100)
    assert archives_to_prune([("a", 10), ("b", 10), ("c", 10)], keep) == ["a"]
    assert archives_to_prune([("a", 60), ("b", 60)], keep) == ["a"]
    assert archives_to_prune([("a", 1)], keep) == []


def test_the_active_file_is_compacted_to_its_newest_events(tmp_path):
    log = Segment(tmp_path, SMALL)
    for i in range(60):
        log.append(b"evt.state.event.x", b"%d" % i + b"." * 40)
    kept = read_records(tmp_path / "events.log")
    assert len(kept) < 30 and kept[-1][2].startswith(b"59")  # the newest survive compaction
    assert [int(p.split(b".")[0]) for _, _, p in kept] == sorted(int(p.split(b".")[0]) for _, _, p in kept)


def test_each_start_archives_the_previous_file_within_the_caps(tmp_path):
    for run in range(4):
        log = Segment(tmp_path, SMALL)
        log.append(b"evt.state.event.x", b"run %d" % run)
        log.close()
    files = log_files(tmp_path)
    assert len(files) == 3 and files[-1].name == "events.log"  # 2 archives + the active file
    assert all(gzip.decompress(f.read_bytes()) for f in files[:-1])
    assert [p for f in files for _, _, p in read_records(f)][-1] == b"run 3"


def test_the_floor_and_write_errors_turn_it_counting_only_and_it_resumes(tmp_path, monkeypatch, caplog):
    free = {"bytes": 500}
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: Usage(10_000, 0, free["bytes"]))
    log = Segment(tmp_path, SMALL)
    for _ in range(5):
        log.append(b"evt.state.event.x", b"p")
    assert log.degraded.startswith("free disk below") and log.appended == 5
    assert json.loads((tmp_path / "mode.json").read_text())["mode"] == "counting"
    assert sum("counting-only" in r.message for r in caplog.records if r.levelname == "CRITICAL") == 1
    written = len(read_records(tmp_path / "events.log"))
    log.resume_if_possible()  # still full: stays counting
    assert log.degraded
    free["bytes"] = 5000
    log.resume_if_possible()
    assert not log.degraded and json.loads((tmp_path / "mode.json").read_text())["mode"] == "writing"
    log.append(b"evt.state.event.x", b"after")
    assert len(read_records(tmp_path / "events.log")) == written + 1

    class Full:
        def write(self, _data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self) -> None: ...

    log._fh = Full()  # noqa: SLF001 - the disk filling between two appends
    log.append(b"evt.state.event.x", b"lost")
    assert log.degraded == "No space left on device"


def test_a_torn_or_corrupt_tail_is_skipped(tmp_path):
    path = tmp_path / "events.log"
    good = record_bytes(b"evt.state.event.x", b"ok", 1.0)
    path.write_bytes(good + good[:7])  # killed mid-write
    assert [p for _, _, p in read_records(path)] == [b"ok"]
    path.write_bytes(good + b"\x00\x00\x00\x05garbage")
    assert [p for _, _, p in read_records(path)] == [b"ok"]
    assert seg.read_records is read_records  # one reader, shared with the API
    path.write_bytes(good + b"\xff\xff\xff\xff" + b"x" * 16)  # a length no record has: never allocated
    assert [p for _, _, p in read_records(path)] == [b"ok"]
    archive = tmp_path / "events.20261123T000000.log.gz"
    archive.write_bytes(gzip.compress(good + good + good[:5]))
    assert [p for _, _, p in read_records(archive)] == [b"ok", b"ok"]
