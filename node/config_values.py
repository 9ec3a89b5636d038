"""`ConfigError` and the value checks every config section shares (`config` and `model_store`
both use them, so they live apart from either)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the file and key."""


def typed(value: Any, kind: type, where: str) -> Any:
    """`value` as `kind` (an int is a float too; a list may be a comma-separated string);
    anything else is a `ConfigError` naming `where`. A bool is never a number; where a string is
    wanted it is "on" or "off" (`mode: off`)."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is list:
        if isinstance(value, str):
            return tuple(p.strip() for p in value.split(",") if p.strip())
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigError(f"{where}: expected a list of strings")
    if kind is str and isinstance(value, bool):  # YAML 1.1 reads a bare off/on (no/yes) as a bool
        return "on" if value else "off"
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ConfigError(f"{where}: expected {kind.__name__}, got {value!r}")
    return value


def absolute_path(value: Any, where: str) -> Path:
    """An absolute path (`~` expanded), normalised lexically so that two spellings of one
    directory compare equal without touching the disk."""
    text = typed(value, str, where)
    path = Path(os.path.normpath(os.path.expanduser(text))) if text else Path()
    if not path.is_absolute():
        raise ConfigError(f"{where}: must be an absolute path, got {value!r}")
    return path


def mapping(value: Any, file: str, path: str, allowed: frozenset[str]) -> dict[str, Any]:
    """A section body: a mapping (None: empty) with no key outside `allowed`; the error names
    the file and the first unknown key by its full path (`model_store.staging.x`)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{file}: {path} must be a mapping")
    for key in value:
        if key not in allowed:
            raise ConfigError(f"{file}: unknown key {path}.{key} (known: {', '.join(sorted(allowed))})")
    return value
