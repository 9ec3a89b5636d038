"""Typed decode errors. A receiving loop catches `WireError`, logs it and carries on."""


class WireError(Exception):
    """Base of every error raised while decoding or routing a frame."""


class MalformedFrame(WireError):
    """The bytes are not a msgpack envelope `{t, v, b}` (garbage, truncated, wrong frame count)."""


class FrameTooLarge(WireError):
    """The frame is larger than the receiver accepts; it is dropped undecoded."""


class UnknownMessage(WireError):
    """The type name is not in the registry, or its version is newer than ours."""


class FieldTypeError(WireError):
    """A known type whose fields are missing or of the wrong type."""


class TopicMismatch(WireError):
    """A message published under a topic that is not declared to carry it."""


class UnexpectedMessage(WireError):
    """A well-formed message of a type this port does not take (refused like a bad frame)."""
