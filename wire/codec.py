"""msgpack codec: a message travels as `{"t": TYPE, "v": VERSION, "b": fields}`."""

from __future__ import annotations

from typing import Any

import msgpack

from skulk.wire.errors import FrameTooLarge, MalformedFrame, UnknownMessage
from skulk.wire.message import Message
from skulk.wire.registry import BY_TYPE
from skulk.wire.schema import compile_decoder, to_plain

MAX_FRAME_BYTES = 8 * 1024 * 1024
"""Default ceiling for one frame; larger frames are refused before msgpack sees them."""


def encode(msg: Message) -> bytes:
    if type(msg).TYPE not in BY_TYPE:
        raise UnknownMessage(f"{type(msg).__name__} is not in the wire registry")
    return msgpack.packb(to_plain(msg), use_bin_type=True)


def unpack(raw: bytes, *, max_bytes: int = MAX_FRAME_BYTES) -> dict[str, Any]:
    """The raw envelope, checked for shape only (the tap prints unknown types with this)."""
    if len(raw) > max_bytes:
        raise FrameTooLarge(f"frame of {len(raw)} bytes exceeds {max_bytes}")
    try:
        envelope = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise MalformedFrame(f"not a msgpack frame: {exc.__class__.__name__}: {exc}") from None
    if not isinstance(envelope, dict) or not {"t", "v", "b"} <= envelope.keys():
        raise MalformedFrame("frame is not a {t, v, b} envelope")
    if not isinstance(envelope["t"], str) or not isinstance(envelope["v"], int):
        raise MalformedFrame("envelope t/v have the wrong types")
    return envelope


def decode(raw: bytes, *, max_bytes: int = MAX_FRAME_BYTES) -> Message:
    envelope = unpack(raw, max_bytes=max_bytes)
    cls = BY_TYPE.get(envelope["t"])
    if cls is None:
        raise UnknownMessage(f"unknown message type {envelope['t']!r}")
    if envelope["v"] > cls.VERSION:
        raise UnknownMessage(f"{cls.TYPE} version {envelope['v']} is newer than ours ({cls.VERSION})")
    return compile_decoder(cls)(envelope, "frame")
