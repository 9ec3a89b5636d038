"""A frozen dataclass as a child's command line, and back.

Each field is one `--flag` (its name, dashes for underscores): the supervisor writes a role's
arguments with `to_argv()` and the role reads them with `from_argv(argv)`, so a flag, its type
and its default are declared once, in the dataclass, and the two sides cannot drift apart.

Field types: `str`, `int`, `float`, `Path`, `bool` (written `0`/`1`), `X | None` (left out when
None), `tuple[X, ...]` (the flag once per item), and a nested dataclass, whose fields join its
parent's (`prefixed` gives them a prefix; a nested `X | None` is None when none of its flags is
given). Floats are written with `repr`, so they come back equal.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

T = TypeVar("T")


def flag_value(text: str) -> bool:
    """`0` or `1` (what `to_argv` writes for a bool)."""
    if text not in ("0", "1"):
        raise argparse.ArgumentTypeError(f"expected 0 or 1, got {text!r}")
    return text == "1"


_READERS: dict[Any, Callable[[str], Any]] = {str: str, int: int, float: float, Path: Path, bool: flag_value}


def prefixed(prefix: str, default: Any) -> Any:
    """A nested dataclass field whose flags all start with `prefix` (`log-`: `--log-json`)."""
    return dataclasses.field(default=default, metadata={"prefix": prefix})


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str  # the dataclass field
    dest: str  # argparse's name for it: unique across nested fields
    hint: Any  # the item type (a leaf) or the nested dataclass
    optional: bool
    many: bool
    nested: bool
    required: bool
    default: Any


def _fields(cls: type, prefix: str = "", base: Any = None) -> list[_Field]:
    """The fields of `cls`; `base`: the instance a nested field defaults to, whose values are
    then its flags' defaults."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint, optional, many = hints[f.name], False, False
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(hint) if a is not type(None)]
            if len(members) != 1:
                raise TypeError(f"{cls.__name__}.{f.name}: only `X | None` unions are arguments")
            hint, optional = members[0], True
        if typing.get_origin(hint) is tuple:
            args = typing.get_args(hint)
            if len(args) != 2 or args[1] is not Ellipsis:
                raise TypeError(f"{cls.__name__}.{f.name}: only `tuple[X, ...]` tuples are arguments")
            hint, many = args[0], True
        nested = dataclasses.is_dataclass(hint)
        if not nested and hint not in _READERS:
            raise TypeError(f"{cls.__name__}.{f.name}: {hint!r} is not an argument type")
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        if base is not None:
            default = getattr(base, f.name)
        name = prefix + (f.metadata.get("prefix", "") if nested else f.name)
        out.append(_Field(f.name, name.replace("-", "_"), hint, optional, many, nested,
                          default is dataclasses.MISSING, default))
    return out


def _flag(field: _Field) -> str:
    return "--" + field.dest.replace("_", "-")


def _write(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(value) if isinstance(value, float) else str(value)


def _argv(args: Any, prefix: str) -> Iterator[str]:
    for field in _fields(type(args), prefix):
        value = getattr(args, field.name)
        if value is None:
            continue
        if field.nested:
            yield from _argv(value, field.dest.replace("_", "-"))
            continue
        for item in value if field.many else (value,):
            yield from (_flag(field), _write(item))


def to_argv(args: Any) -> tuple[str, ...]:
    """`args` (a dataclass of argument fields) as command-line arguments."""
    return tuple(_argv(args, ""))


def _group(field: _Field) -> tuple[str, Any]:
    """A nested field's flag prefix, and the instance its flags default to (if any)."""
    return field.dest.replace("_", "-"), None if field.required or field.default is None else field.default


def _add(p: argparse.ArgumentParser, cls: type, prefix: str, optional: bool, base: Any = None) -> None:
    for field in _fields(cls, prefix, base):
        if field.nested:
            group_prefix, group_base = _group(field)
            _add(p, field.hint, group_prefix, optional or field.optional, group_base)
            continue
        kw: dict[str, Any] = {"dest": field.dest, "type": _READERS[field.hint]}
        if field.many:
            kw["action"] = "append"
        if optional:  # absent flags stay out of the namespace: the group's presence is seen
            kw["default"] = argparse.SUPPRESS
        elif field.required:
            kw["required"] = True
        else:
            kw["default"] = None if field.many else field.default
        p.add_argument(_flag(field), **kw)


class MissingArgument(ValueError):
    """A nested group was given without one of its required flags."""


def _build(cls: type[T], ns: argparse.Namespace, prefix: str, base: Any = None) -> T:
    values: dict[str, Any] = {}
    for field in _fields(cls, prefix, base):
        if field.nested:
            group_prefix, group_base = _group(field)
            absent = field.optional and not any(hasattr(ns, f.dest) for f in _leaves(field.hint, group_prefix))
            values[field.name] = None if absent else _build(field.hint, ns, group_prefix, group_base)
            continue
        value = getattr(ns, field.dest, dataclasses.MISSING)
        if value is dataclasses.MISSING or (field.many and value is None):
            if field.required:
                raise MissingArgument(f"{_flag(field)} is required")
            value = field.default
        values[field.name] = tuple(value) if field.many else value
    return cls(**values)


def _leaves(cls: type, prefix: str) -> Iterator[_Field]:
    for field in _fields(cls, prefix):
        if field.nested:
            yield from _leaves(field.hint, field.dest.replace("_", "-"))
        else:
            yield field


def parser_for(cls: type, prog: str | None = None, *, add_help: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, add_help=add_help, allow_abbrev=False)
    _add(p, cls, "", False)
    return p


def from_argv(cls: type[T], argv: Sequence[str], prog: str | None = None) -> T:
    """Parse `argv` into `cls` (argparse's usage error and exit on a bad or missing flag)."""
    p = parser_for(cls, prog)
    ns = p.parse_args(list(argv))
    try:
        return _build(cls, ns, "")
    except MissingArgument as exc:
        p.error(str(exc))


def from_known_argv(cls: type[T], argv: Sequence[str]) -> tuple[T, list[str]]:
    """Parse the flags of `cls` out of `argv`; the rest is returned, in order."""
    p = parser_for(cls, add_help=False)
    ns, rest = p.parse_known_args(list(argv))
    try:
        return _build(cls, ns, ""), rest
    except MissingArgument as exc:
        p.error(str(exc))


class Argv:
    """A mixin for an arguments dataclass: `args.to_argv()`, `Args.from_argv(argv)`."""

    __slots__ = ()

    def to_argv(self) -> tuple[str, ...]:
        return to_argv(self)

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> Self:
        return from_argv(cls, argv, prog=cls.__name__)
