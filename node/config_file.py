"""`skulk.yaml` as a document that `GET`/`PUT /config` and the cluster sync edit.

The node reads the file once, at start (`config.load`); these helpers serve the API and the
master, which rewrite it while the node runs. Secrets (`hf_token`, API keys, any key named like
a token, key or password) never leave a node: they are stripped from every answer and from
everything that goes on the wire, and a node that writes a synced config keeps its own. All
pure except `read` and `write` (atomic: temp file in the same directory, fsync, rename).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from skulk.node.config import ConfigError, validate, yaml_fields
from skulk.wire.config_sync import MAX_CONFIG_BYTES

SECRET_NAMES = frozenset({"hf_token", "token", "keys", "api_key", "api_keys", "password", "secret"})
SECRET_SUFFIXES = ("_token", "_key", "_keys", "_secret", "_password")

APPLIED_AT_START: dict[str, str] = {
    "node": "the supervisor binds the ports and the listen address, and names the node, at start",
    "cluster": "gossip and the master get namespace, peers and timeouts as arguments at start",
    "heartbeat": "the supervisor's watchdog is built at start",
    "children": "child specs (ready deadline, shutdown time) are built at start",
    "supervisor": "the root's restart budget is built at start",
    "runners_supervisor": "the runners' restart budget is built at start",
    "api": "gunicorn's workers and threads, the stream timings and limits are set at start; the API "
           "reads its keys (`api.keys`) from the file when it starts",
    "runner": "runners get their slice as arguments; running ones keep theirs",
    "speculative": "runners get the speculative mode as arguments; running ones keep theirs",
    "tracing": "the janitor gets its retention as an argument at start; `enabled` is the cluster's "
               "initial tracing state, read at start (`PUT /v1/tracing` switches it live)",
    "logging": "every process gets its log settings as arguments at start",
    "event_log": "the eventlog role gets its retention as arguments at start",
    "hf_token": "HF_TOKEN is set for the children at start",
    "model_store": "the store and the master get the store's and this node's staging settings "
                   "as arguments at start (upstream: model_store changes need a restart)",
}
"""Which part of the node reads each section, and when. Every section is read at start today
(each child gets its slice as arguments), so any change needs a restart; a section that comes
to be applied live leaves this table."""


def is_secret(key: object) -> bool:
    """A key whose value must never be shown or leave the node."""
    name = str(key).lower()
    return name in SECRET_NAMES or name.endswith(SECRET_SUFFIXES)


def strip_secrets(data: Mapping[str, Any]) -> dict[str, Any]:
    """A copy without secret keys, at any depth (for answers and for the wire)."""
    return {k: strip_secrets(v) if isinstance(v, Mapping) else v for k, v in data.items() if not is_secret(k)}


def secrets_of(data: Mapping[str, Any]) -> dict[str, Any]:
    """Only the secret keys, with the mappings that lead to them."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if is_secret(key):
            out[key] = value
        elif isinstance(value, Mapping) and (inner := secrets_of(value)):
            out[key] = inner
    return out


def keep_secrets(new: Mapping[str, Any], old: Mapping[str, Any]) -> dict[str, Any]:
    """`new` plus every secret of `old` that `new` does not set (upstream preserves `hf_token`
    when a `PUT /config` omits it; a synced config, which has none, keeps the node's own)."""
    out = dict(new)
    for key, value in secrets_of(old).items():
        if is_secret(key):
            out.setdefault(key, value)
        elif isinstance(out.get(key, {}), Mapping):
            out[key] = keep_secrets(out.get(key) or {}, value)
    return out


def settings(data: Mapping[str, Any]) -> dict[str, Any]:
    """Every setting's effective value (the file over the defaults), by YAML path; raises
    `ConfigError` as the node would at start."""
    cfg = validate(data, Path("."))
    return {path: getattr(cfg, name) for path, name in yaml_fields().items()}


def changed_settings(old: Mapping[str, Any], new: Mapping[str, Any]) -> set[str]:
    """The YAML paths whose effective value differs (writing out a default changes nothing)."""
    after = settings(new)
    try:
        before = settings(old)
    except ConfigError:  # the old file could not have been used: everything is new
        return set(after)
    return {path for path, value in after.items() if before[path] != value}


def requires_restart(changed: Iterable[str]) -> bool:
    """Whether any changed setting is read only at start (decided per section)."""
    return any(path.split(".", 1)[0] in APPLIED_AT_START for path in changed)


def config_body(body: Any) -> Any:
    """`PUT /config` takes the config itself or `{"config": {...}}` (upstream)."""
    if isinstance(body, dict) and set(body) == {"config"} and isinstance(body["config"], dict):
        return body["config"]
    return body


def prepare_put(body: Any, old: Mapping[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """A `PUT /config` body against the current file: the file to write (the body, plus the
    secrets it omits) and the settings it changes. `ConfigError` names the offending key, as
    the node would at start, before anything is written or sent."""
    if not isinstance(body, dict):
        raise ConfigError("config: top level must be a mapping")
    new = keep_secrets(body, old)
    changed = changed_settings(old, new)
    if len(dump(strip_secrets(new)).encode()) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config: larger than {MAX_CONFIG_BYTES} bytes")
    return new, changed


def dump(data: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=False)


def parse(text: str, where: str) -> dict[str, Any]:
    """YAML text as a mapping (empty: {}); `ConfigError` otherwise."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: top level must be a mapping")
    return data


def read(path: Path) -> dict[str, Any] | None:
    """The file as a mapping, None when there is none; `ConfigError` when it cannot be used."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    return parse(text, str(path))


def read_text(path: Path) -> str | None:
    """The file's exact text (to put it back), None when there is none."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def write(path: Path, data: Mapping[str, Any]) -> None:
    write_text(path, dump(data))


def restore(path: Path, text: str | None) -> None:
    """Put back what `read_text` returned (None: there was no file)."""
    if text is None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    else:
        write_text(path, text)


def write_text(path: Path, text: str) -> None:
    """Replace the file atomically: a reader (or a crash) sees the old file or the new one."""
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o600  # it may hold a token
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power loss
    finally:
        os.close(dir_fd)
