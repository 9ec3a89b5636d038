"""Every registered message round-trips; bad frames raise typed errors; docs match the registry."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import msgpack
import pytest

import skulk.wire as wire_pkg
from skulk.wire import codec, registry
from skulk.wire.errors import FieldTypeError, FrameTooLarge, MalformedFrame, TopicMismatch, UnknownMessage
from skulk.wire.events import ServiceStatus
from skulk.wire.message import Message
from skulk.wire.topics import ALL_TOPICS, EVT_SUPERVISOR

ROOT = Path(__file__).resolve().parents[2]


def sample(hint: typing.Any, depth: int = 0) -> typing.Any:
    """A non-default value of the given type, so a round trip really exercises every field."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is str:
        return "s-é"
    if hint is int:
        return 7
    if hint is float:
        return 2.5
    if hint is bool:
        return True
    if hint is bytes:
        return b"\x00\xff"
    if isinstance(hint, type) and issubclass(hint, Message):
        return instance(hint, depth + 1)
    if origin in (typing.Union, __import__("types").UnionType):
        return sample(next(a for a in args if a is not type(None)), depth)
    if origin is typing.Literal:
        return args[0]
    if origin is tuple:
        return (sample(args[0], depth), sample(args[0], depth))
    if origin is list:
        return [sample(args[0], depth)]
    if origin is dict:
        return {sample(args[0], depth): sample(args[1], depth)}
    raise TypeError(hint)


def instance(cls: type[Message], depth: int = 0) -> Message:
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: sample(hints[f.name], depth) for f in dataclasses.fields(cls)})


@pytest.mark.parametrize("cls", registry.ALL, ids=lambda c: c.TYPE)
def test_every_registered_type_round_trips(cls):
    msg = instance(cls)
    assert codec.decode(codec.encode(msg)) == msg


def test_every_message_class_is_registered():
    import importlib
    import pkgutil

    import skulk.cluster as cluster_pkg

    found = set()
    modules = [(name, mod.name) for pkg, name in ((wire_pkg, "wire"), (cluster_pkg, "cluster"))
               for mod in pkgutil.iter_modules(pkg.__path__)]  # the state's events are messages too
    for package, name in modules:
        module = importlib.import_module(f"skulk.{package}.{name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Message) and obj.TYPE:  # bases have no wire name
                found.add(obj)
    assert found == set(registry.ALL)


def test_docs_list_exactly_the_registered_names():
    text = (ROOT / "docs" / "wire.md").read_text()
    documented = set(re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \|", text, re.M))
    assert documented == set(registry.BY_TYPE)


def test_topics_only_carry_registered_types():
    for topic in ALL_TOPICS:
        assert all(cls in registry.ALL for cls in topic.carries)


def test_publishing_under_the_wrong_topic_fails():
    from skulk.wire.sockets import publish

    with pytest.raises(TopicMismatch):
        publish(None, EVT_SUPERVISOR, instance(ServiceStatus))  # type: ignore[arg-type]


@pytest.mark.parametrize("raw", [b"", b"\xc1", b"garbage", msgpack.packb([1, 2]),
                                 msgpack.packb({"t": 1, "v": 1, "b": {}}),
                                 msgpack.packb({"t": "x"})])
def test_garbage_is_malformed(raw):
    with pytest.raises(MalformedFrame):
        codec.decode(raw)


def test_unknown_type_and_newer_version():
    with pytest.raises(UnknownMessage):
        codec.decode(msgpack.packb({"t": "nope.nothing", "v": 1, "b": {}}))
    with pytest.raises(UnknownMessage):
        codec.decode(msgpack.packb({"t": ServiceStatus.TYPE, "v": 99, "b": {}}))


@pytest.mark.parametrize("body", [
    {"role": 1, "child_id": "c", "pid": 1, "seq": 1, "uptime_s": 1.0},      # int for str
    {"role": "r", "child_id": "c", "pid": True, "seq": 1, "uptime_s": 1.0},  # bool for int
    {"role": "r", "child_id": "c", "pid": 1, "seq": 1, "uptime_s": "1"},     # str for float
    {"role": "r", "child_id": "c", "pid": 1, "seq": 1},                      # missing field
    "not a map",
])
def test_wrong_field_types_are_typed_errors(body):
    with pytest.raises(FieldTypeError):
        codec.decode(msgpack.packb({"t": ServiceStatus.TYPE, "v": 1, "b": body}))


def test_nested_and_collection_fields_are_checked():
    from skulk.wire.control import AdminReply

    bad = {"t": AdminReply.TYPE, "v": 1, "b": {"ok": True, "children": [{"t": "x", "v": 1, "b": {}}]}}
    with pytest.raises(FieldTypeError):
        codec.decode(msgpack.packb(bad))


def test_extra_fields_from_a_newer_peer_are_ignored_and_ints_widen_to_float():
    body = {"role": "r", "child_id": "c", "pid": 1, "seq": 1, "uptime_s": 3, "added_later": [1]}
    msg = codec.decode(msgpack.packb({"t": ServiceStatus.TYPE, "v": 1, "b": body}))
    assert msg == ServiceStatus(role="r", child_id="c", pid=1, seq=1, uptime_s=3.0)


def test_oversized_frame_is_refused_before_decoding():
    with pytest.raises(FrameTooLarge):
        codec.decode(b"\x00" * (codec.MAX_FRAME_BYTES + 1))
    with pytest.raises(FrameTooLarge):
        codec.decode(codec.encode(instance(ServiceStatus)), max_bytes=8)


def test_an_indexed_event_may_carry_every_event_type():
    """A type in EVENT_TYPES but not in the `Event` union is refused by every replica's decoder
    (seen: a new event indexed by the leader and dropped as a bad frame everywhere else)."""
    import typing

    from skulk.cluster.state import EVENT_TYPES, Event

    assert set(typing.get_args(Event)) == set(EVENT_TYPES)


def test_string_enums_travel_as_their_strings():
    """A StrEnum in a str field is its value on the wire (msgpack and JSON): same bytes as the
    plain string, and it decodes to a str equal to the member."""
    import json

    from skulk.cluster.state import RunnerKind, RunnerStatus, TaskStatus, TaskStatusUpdated
    from skulk.wire.events import ChildLifecycle, LifecycleEvent

    typed = RunnerStatus(kind=RunnerKind.READY)
    assert codec.encode(typed) == codec.encode(RunnerStatus(kind="RunnerReady"))
    back = codec.decode(codec.encode(typed))
    assert type(back.kind) is str and back == typed and back.kind == RunnerKind.READY  # type: ignore[attr-defined]
    status = TaskStatusUpdated(task_id="t", status=TaskStatus.TIMED_OUT)
    assert msgpack.unpackb(codec.encode(status))["b"]["status"] == "TimedOut"
    lifecycle = ChildLifecycle(child_id="c", supervisor="s", event=LifecycleEvent.READY_TIMEOUT, pid=1, restarts=0)
    assert json.dumps({"event": lifecycle.event}) == '{"event": "ready_timeout"}'
