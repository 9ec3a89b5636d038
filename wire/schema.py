"""Field-by-field conversion between message dataclasses and msgpack-native values.

Each class's type hints are resolved once (`compile_decoder`) into a tree of converters, so a
frame with a wrong field type fails with `FieldTypeError` naming the field, instead of
building a half-typed object that crashes the receiver later.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

from skulk.wire.errors import FieldTypeError
from skulk.wire.message import Message

Converter = Callable[[Any, str], Any]


_SCALARS = (str, int, float, bool, bytes, type(None))


def to_plain(value: Any) -> Any:
    """A message (or any field value) as msgpack-native data: dicts, lists, scalars."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, Message):
        return {"t": value.TYPE, "v": value.VERSION, "b": fields_of(value)}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    return value


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def fields_of(msg: Message) -> dict[str, Any]:
    names = _FIELD_NAMES.get(type(msg))
    if names is None:  # dataclasses.fields() rebuilds a tuple per call: cache it per class
        names = _FIELD_NAMES[type(msg)] = tuple(f.name for f in dataclasses.fields(msg))
    return {name: to_plain(getattr(msg, name)) for name in names}


def _scalar(expected: type, name: str) -> Converter:
    def convert(value: Any, where: str) -> Any:
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if expected is int and isinstance(value, bool):
            raise FieldTypeError(f"{where}: expected int, got bool")
        if not isinstance(value, expected):
            raise FieldTypeError(f"{where}: expected {name}, got {type(value).__name__}")
        if expected is int and isinstance(value, int) and not INT_MIN <= value <= INT_MAX:
            raise FieldTypeError(f"{where}: integer out of range")
        return value

    return convert


INT_MIN, INT_MAX = -(2 ** 62), 2 ** 62
"""What an int field may hold: a frame from the network with a counter near 2**64 (seen from the
fuzzer: an election clock of 2**64 - 1, which the master then incremented and could not encode
any more, and crashed) is refused as a bad frame; every int we make is far below these."""


def _none(value: Any, where: str) -> None:
    if value is not None:
        raise FieldTypeError(f"{where}: expected None, got {type(value).__name__}")
    return None


def _any(value: Any, where: str) -> Any:
    return value


def converter_for(hint: Any) -> Converter:
    """Build the converter for one resolved type hint."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return _any
    if hint is type(None) or hint is None:
        return _none
    if hint in (str, int, float, bool, bytes):
        return _scalar(hint, hint.__name__)
    if isinstance(hint, type) and issubclass(hint, Message):
        return compile_decoder(hint)
    if origin in (typing.Union, types.UnionType):
        options = [converter_for(a) for a in args]

        def union(value: Any, where: str) -> Any:
            errors = []
            for option in options:
                try:
                    return option(value, where)
                except FieldTypeError as exc:
                    errors.append(str(exc))
            raise FieldTypeError(f"{where}: matches none of {hint} ({'; '.join(errors)})")

        return union
    if origin is typing.Literal:
        allowed = set(args)

        def literal(value: Any, where: str) -> Any:
            # a map or an array is no literal (and unhashable: `in` a set would raise TypeError
            # and crash the receiver; found by fuzzing the supervisor's notify socket)
            if isinstance(value, (dict, list)) or value not in allowed:
                raise FieldTypeError(f"{where}: {str(value)[:100]} not one of {sorted(map(str, allowed))}")
            return value

        return literal
    if origin in (list, tuple):
        item = converter_for(args[0]) if args else _any
        build = tuple if origin is tuple else list

        def sequence(value: Any, where: str) -> Any:
            if not isinstance(value, (list, tuple)):
                raise FieldTypeError(f"{where}: expected array, got {type(value).__name__}")
            return build(item(v, f"{where}[{i}]") for i, v in enumerate(value))

        return sequence
    if origin is dict:
        key = converter_for(args[0]) if args else _any
        val = converter_for(args[1]) if args else _any

        def mapping(value: Any, where: str) -> Any:
            if not isinstance(value, dict):
                raise FieldTypeError(f"{where}: expected map, got {type(value).__name__}")
            return {key(k, f"{where}.key"): val(v, f"{where}[{k!r}]") for k, v in value.items()}

        return mapping
    raise TypeError(f"unsupported wire field type {hint!r}")


_DECODERS: dict[type, Converter] = {}


def compile_decoder(cls: type[Message]) -> Converter:
    """The converter that rebuilds `cls` from its plain `{t, v, b}` form (cached per class)."""
    if cls in _DECODERS:
        return _DECODERS[cls]
    # Registered before its fields compile, so self-referencing types terminate.
    fields: list[tuple[str, Converter, bool]] = []

    def decode(value: Any, where: str) -> Message:
        if not isinstance(value, dict) or value.get("t") != cls.TYPE:
            raise FieldTypeError(f"{where}: expected {cls.TYPE}")
        body = value.get("b")
        if not isinstance(body, dict):
            raise FieldTypeError(f"{where}: body of {cls.TYPE} is not a map")
        kwargs = {}
        for name, convert, required in fields:
            if name in body:
                kwargs[name] = convert(body[name], f"{cls.TYPE}.{name}")
            elif required:
                raise FieldTypeError(f"{cls.TYPE}: missing field {name!r}")
        return cls(**kwargs)

    _DECODERS[cls] = decode
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        fields.append((f.name, converter_for(hints[f.name]), required))
    return decode
