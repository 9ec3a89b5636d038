"""Frames that a node's ZeroMQ ports must survive: random bytes, truncated and oversized frames,
valid msgpack that is not an envelope, envelopes of an unknown type or of the wrong message,
known types with wrong field types or missing fields, deep nesting, huge ints and strings,
wrong frame counts, and (where a port's `accepted` types are safe to send from a stranger)
well-formed messages with random field values.

Values are drawn from a seeded `random.Random` (the seed is printed, so a run can be repeated);
a message's valid body is built from its type hints, the way `wire/schema.py` checks them.
"""

from __future__ import annotations

import dataclasses
import random
import types
import typing
from typing import Any

import msgpack

from skulk.wire import codec, registry
from skulk.wire.message import Message

WEIGHTS = {"random": 4, "truncated": 4, "oversized": 1, "not_envelope": 4, "unknown_type": 3, "bad_version": 2,
           "wrong_message": 6, "bad_fields": 8, "missing_fields": 4, "deep": 2, "huge": 1, "frame_count": 3,
           "accepted": 6}
"""Every kind of shot and how often it is drawn (an oversized frame costs the sender its
connection, and megabytes: rarer)."""
KINDS = tuple(WEIGHTS)

INT_EDGES = (0, -1, 1, 2**31 - 1, -2**31, 2**32, 2**53 + 1, 2**63 - 1, -2**63, 2**64 - 1)
FLOAT_EDGES = (0.0, -0.0, 1e308, -1e308, 5e-324, float("nan"), float("inf"), float("-inf"))
STRINGS = ("", "\x00", "../../etc/passwd", "%s%n", "é" * 3, "\ud7ff", "skulk/demo-tiny", "a" * 300,
           "{}", "null", "evt.", " ", "\n")


@dataclasses.dataclass(frozen=True)
class Shot:
    kind: str
    frames: list[bytes]  # the payload part (a target adds its own envelope: topic, REQ delimiter)


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


class FrameMaker:
    """Makes shots for one port. `accepted`: message types it is safe to send there well-formed
    with random values (a stranger's hello is refused by its namespace, a load report for an
    unknown runner is forgotten); `topic_frame`: whether frames go `[topic, payload]`."""

    def __init__(self, rng: random.Random, max_bytes: int = codec.MAX_FRAME_BYTES,
                 accepted: tuple[type[Message], ...] = (), refused: tuple[type[Message], ...] = ()) -> None:
        self.rng = rng
        self.max_bytes = max_bytes
        self.accepted = accepted
        others = [c for c in registry.ALL if c not in accepted and c not in refused]
        self.wrong = others  # valid messages this port does not take

    # ---- values -------------------------------------------------------------------------------
    def text(self) -> str:
        r = self.rng.random()
        if r < 0.3:
            return self.rng.choice(STRINGS)
        if r < 0.35:
            return "x" * self.rng.choice((1 << 10, 1 << 16, 1 << 20))
        return "".join(chr(self.rng.choice((self.rng.randrange(32, 127), self.rng.randrange(0x80, 0xD7FF))))
                       for _ in range(self.rng.randrange(0, 24)))

    def integer(self) -> int:
        return self.rng.choice(INT_EDGES) if self.rng.random() < 0.5 else self.rng.randrange(-1000, 100_000)

    def value(self, hint: Any, depth: int = 0) -> Any:
        """A valid plain value for a type hint (what `wire/schema.py` accepts)."""
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if hint is Any:
            return self.junk(depth + 1)
        if hint is str:
            return self.text()
        if hint is bool:
            return self.rng.random() < 0.5
        if hint is int:
            return self.integer()
        if hint is float:
            return self.rng.choice(FLOAT_EDGES) if self.rng.random() < 0.3 else self.rng.uniform(-1e6, 1e6)
        if hint is bytes:
            return self.rng.randbytes(self.rng.randrange(0, 64))
        if hint is type(None) or hint is None:
            return None
        if isinstance(hint, type) and issubclass(hint, Message):
            return self.envelope(hint, depth + 1)
        if origin in (typing.Union, types.UnionType):
            return self.value(self.rng.choice(args), depth)
        if origin is typing.Literal:
            return self.rng.choice(args)
        if origin in (list, tuple):
            n = 0 if depth > 3 else self.rng.choice((0, 1, 2, 3, 8))
            return [self.value(args[0] if args else Any, depth + 1) for _ in range(n)]
        if origin is dict:
            n = 0 if depth > 3 else self.rng.choice((0, 1, 3))
            return {self.value(args[0], depth + 1): self.value(args[1], depth + 1) for _ in range(n)}
        raise TypeError(f"no value for {hint!r}")

    def envelope(self, cls: type[Message], depth: int = 0) -> dict[str, Any]:
        hints = typing.get_type_hints(cls)
        body = {f.name: self.value(hints[f.name], depth) for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                or self.rng.random() < 0.5}
        return {"t": cls.TYPE, "v": cls.VERSION, "b": body}

    def junk(self, depth: int = 0) -> Any:
        """Any msgpack value."""
        choices: list[Any] = [None, True, self.integer(), self.rng.choice(FLOAT_EDGES), self.text(),
                              self.rng.randbytes(self.rng.randrange(0, 32))]
        if depth < 3:
            choices += [[self.junk(depth + 1) for _ in range(self.rng.randrange(0, 4))],
                        {self.text(): self.junk(depth + 1) for _ in range(self.rng.randrange(0, 4))}]
        return self.rng.choice(choices)

    # ---- shots --------------------------------------------------------------------------------
    def valid(self) -> bytes:
        cls = self.rng.choice(self.wrong)
        try:
            return _pack(self.envelope(cls))
        except (OverflowError, ValueError):  # an int msgpack cannot carry: send it anyway, as junk
            return _pack({"t": cls.TYPE, "v": cls.VERSION, "b": {}})

    def payload(self, kind: str) -> bytes | list[bytes]:
        rng = self.rng
        if kind == "random":
            return rng.randbytes(rng.choice((0, 1, 7, 64, 1000, 65536)))
        if kind == "truncated":
            whole = self.valid()
            return whole[:rng.randrange(0, max(1, len(whole)))]
        if kind == "oversized":
            size = self.max_bytes + rng.choice((1, 1024))
            return _pack({"t": "x", "v": 1, "b": {"pad": b"\0" * size}}) if rng.random() < 0.5 else b"\x92" * size
        if kind == "not_envelope":
            return _pack(self.junk())
        if kind == "unknown_type":
            return _pack({"t": self.text(), "v": 1, "b": {}})
        if kind == "bad_version":
            cls = rng.choice(registry.ALL)
            return _pack({"t": cls.TYPE, "v": rng.choice((-1, 2**31, 99, 2**63 - 1)), "b": {}})
        if kind == "wrong_message":
            return self.valid()
        if kind in ("bad_fields", "missing_fields"):
            cls = rng.choice(registry.ALL)
            env = self.envelope(cls)
            body = env["b"]
            if body and kind == "missing_fields":
                body.pop(rng.choice(list(body)))
            elif body:
                body[rng.choice(list(body))] = self.junk()
            else:
                body[self.text()] = self.junk()
            return _pack(env)
        if kind == "deep":  # written by hand: msgpack's packer stops at 512 levels
            depth = rng.choice((100, 600, 1100, 100_000))
            level = rng.choice((b"\x91", b"\x81\xa1b"))  # [x] or {"b": x}
            head = _pack({"t": rng.choice(registry.ALL).TYPE, "v": 1})
            return b"\x83" + head[1:] + b"\xa1b" + level * depth + b"\xc0"
        if kind == "huge":
            return _pack({"t": rng.choice(registry.ALL).TYPE, "v": rng.choice((2**64 - 1, -2**63)),
                          "b": {"s": "x" * rng.choice((1 << 16, 1 << 20)), "n": 2**64 - 1, "f": 1e308}})
        if kind == "frame_count":
            return [self.valid() for _ in range(rng.choice((0, 2, 3, 9)))] or [b""]
        if kind == "accepted":
            if not self.accepted:
                return self.valid()
            cls = rng.choice(self.accepted)
            try:
                return _pack(self.envelope(cls))
            except (OverflowError, ValueError):
                return self.valid()
        raise ValueError(kind)

    def shot(self) -> Shot:
        kind = self.rng.choices(KINDS, weights=tuple(WEIGHTS.values()))[0]
        payload = self.payload(kind)
        return Shot(kind, payload if isinstance(payload, list) else [payload])
