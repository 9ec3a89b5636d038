"""The API's keys (`api.keys` in `skulk.yaml`) as frozen values: parsing, and finding the key a
client presented. Pure, apart from `from_file`.

A key is stored as its SHA-256 only: a plaintext `key` in the file is hashed while parsing and
the text is dropped, so no value built here can leak it through a log line or a `repr`. Error
messages name the entry (`api.keys[1]`, its `name`), never a key's text or hash. A client's
key is hashed and compared with every configured hash in constant time (`hmac.compare_digest`),
all of them, so the time taken does not tell which entry came close.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from skulk.node.config_values import ConfigError


class Scope(StrEnum):
    """What a route needs (declared with it in `services/api/http/routes.py`) and what a key grants.
    `admin` includes `inference`; `public` is for routes only (`/health`, the dashboard's files)."""

    PUBLIC = "public"
    INFERENCE = "inference"
    ADMIN = "admin"


KEY_SCOPES = (Scope.INFERENCE, Scope.ADMIN)
MIN_KEY_CHARS = 16
"""A plaintext key shorter than this is refused: it could be guessed (`openssl rand -hex 32` makes a good one)."""
SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
ENTRY_KEYS = frozenset({"name", "scope", "key", "key_sha256"})


@dataclass(frozen=True, slots=True)
class ApiKey:
    name: str
    scope: Scope
    sha256: bytes = field(repr=False)  # the digest (32 bytes), never the key
    plaintext: bool = field(default=False, compare=False)  # given as `key` (warned about at start)

    def grants(self, needed: Scope) -> bool:
        return needed is Scope.PUBLIC or self.scope is Scope.ADMIN or needed is self.scope


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def find(keys: tuple[ApiKey, ...], presented: str) -> ApiKey | None:
    """The configured key whose hash is the presented key's, compared in constant time with
    every entry (no early exit)."""
    wanted = digest(presented)
    found = None
    for key in keys:
        if hmac.compare_digest(key.sha256, wanted):
            found = key
    return found


def _entry(value: Any, where: str) -> ApiKey:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping with name, scope and key or key_sha256")
    unknown = sorted(str(k) for k in set(value) - ENTRY_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]} (known: key, key_sha256, name, scope)")
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{where}.name: required, a non-empty string")
    where = f"{where} ({name})"
    scope = value.get("scope")
    if scope not in [s.value for s in KEY_SCOPES]:
        raise ConfigError(f"{where}.scope: must be inference or admin")
    if ("key" in value) == ("key_sha256" in value):
        raise ConfigError(f"{where}: give exactly one of key and key_sha256")
    if "key" in value:
        key = value["key"]
        if not isinstance(key, str) or len(key.strip()) < MIN_KEY_CHARS or key != key.strip():
            raise ConfigError(f"{where}.key: must be a string of at least {MIN_KEY_CHARS} characters "
                              "without surrounding spaces")
        return ApiKey(name, Scope(scope), digest(key), plaintext=True)
    hexed = value["key_sha256"]
    if not isinstance(hexed, str) or not SHA256_HEX.fullmatch(hexed):
        raise ConfigError(f"{where}.key_sha256: must be 64 hex digits (the SHA-256 of the key)")
    return ApiKey(name, Scope(scope), bytes.fromhex(hexed))


def parse(value: Any, where: str) -> tuple[ApiKey, ...]:
    """`api.keys` (None: no keys); `ConfigError` names the entry, never its key."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of {{name, scope, key or key_sha256}}")
    keys = tuple(_entry(item, f"{where}[{i}]") for i, item in enumerate(value))
    names = [k.name for k in keys]
    if (dup := next((n for n in names if names.count(n) > 1), None)) is not None:
        raise ConfigError(f"{where}: the name {dup!r} is used twice (names identify keys in logs and limits)")
    hashes = [k.sha256 for k in keys]
    if len(set(hashes)) != len(hashes):
        raise ConfigError(f"{where}: two entries have the same key")
    return keys


def from_file(path: Path) -> tuple[ApiKey, ...]:
    """The keys in a node's `skulk.yaml` (none when there is no file). The API reads them
    itself at start, so no key or hash is ever on a command line, where `ps` would show it."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        return ()
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the API keys: {type(exc).__name__}") from None
    api = data.get("api") if isinstance(data, dict) else None
    return parse(api.get("keys") if isinstance(api, dict) else None, f"{path}: api.keys")
