"""`model_store` in skulk.yaml: one node (the store host) keeps every model once and serves it
on the LAN; every other node stages a copy under its own `node_cache_path` before it runs it.

Read once at start into frozen values; an absent section means no store (zero config: the
local models dir, as before). Strict like the rest of the file: an unknown key at any depth,
a missing `store_host` or `store_path`, a bad port, a negative budget, or a staging dir that
is, lies in or holds the store is a `ConfigError` naming the key, so the node stops at start
instead of staging into its own store. `staging_for` (pure) applies `node_overrides`;
`StoreSlice` carries one node's slice to its roles as command-line arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from skulk.node.argv import Argv
from skulk.node.config_values import ConfigError, absolute_path, mapping, typed

DEFAULT_STORE_PORT = 58080
DEFAULT_KEEP_GB = 40.0
STAGING_DIR = "staging"
"""The default `node_cache_path` is `<home>/staging`, not upstream's `~/.skulk/staging`:
several nodes on one machine (tests, demos) must never share a staging dir."""

_TOP = frozenset({"enabled", "store_host", "store_http_host", "store_port", "store_path",
                  "download", "staging", "node_overrides"})
_DOWNLOAD = frozenset({"allow_hf_fallback"})
_STAGING: dict[str, type] = {"enabled": bool, "node_cache_path": Path,
                             "cleanup_on_deactivate": bool, "staging_keep_recent_gb": float}
_OVERRIDE = frozenset({"staging"})


@dataclass(frozen=True, slots=True, kw_only=True)
class StagingConfig:
    """How a node keeps its staged copies (the base, or one node's after its override)."""

    enabled: bool = True
    node_cache_path: Path
    cleanup_on_deactivate: bool = True
    staging_keep_recent_gb: float = DEFAULT_KEEP_GB  # most-recently-used grace budget; 0 = strict


@dataclass(frozen=True, slots=True, kw_only=True)
class StagingOverride:
    """One node's partial `staging`: None leaves the base's value."""

    enabled: bool | None = None
    node_cache_path: Path | None = None
    cleanup_on_deactivate: bool | None = None
    staging_keep_recent_gb: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelStoreConfig:
    store_host: str  # a node name or a node id
    store_path: Path
    staging: StagingConfig
    enabled: bool = True
    store_http_host: str | None = None  # the host peers fetch from; default: the store host's address
    store_port: int = DEFAULT_STORE_PORT
    allow_hf_fallback: bool = True
    node_overrides: tuple[tuple[str, StagingOverride], ...] = ()  # (node name or id, override)


def same_name(a: str, b: str) -> bool:
    """Node names compare without case (upstream matches host names case-insensitively)."""
    return a.casefold() == b.casefold()


def parse(body: Any, file: str, home: Path) -> ModelStoreConfig | None:
    """The section as typed values (`home` gives the default staging dir); `ConfigError`
    names the file and the key."""
    if body is None:
        return None
    top = mapping(body, file, "model_store", _TOP)
    for key, what in (("store_host", "a node name or node id"), ("store_path", "an absolute path")):
        if top.get(key) in (None, ""):
            raise ConfigError(f"{file}: model_store.{key} is required ({what})")
    store_host = typed(top["store_host"], str, f"{file}: model_store.store_host").strip()
    http_host = top.get("store_http_host")
    port = typed(top.get("store_port", DEFAULT_STORE_PORT), int, f"{file}: model_store.store_port")
    if not 1 <= port <= 65535:
        raise ConfigError(f"{file}: model_store.store_port must be in 1..65535, got {port}")
    download = mapping(top.get("download"), file, "model_store.download", _DOWNLOAD)
    base = _staging(top.get("staging"), file, "model_store.staging")
    store = ModelStoreConfig(
        store_host=store_host,
        store_path=absolute_path(top["store_path"], f"{file}: model_store.store_path"),
        staging=StagingConfig(**{"node_cache_path": home / STAGING_DIR, **base}),
        enabled=typed(top.get("enabled", True), bool, f"{file}: model_store.enabled"),
        store_http_host=None if http_host in (None, "") else
        typed(http_host, str, f"{file}: model_store.store_http_host"),
        store_port=port,
        allow_hf_fallback=typed(download.get("allow_hf_fallback", True), bool,
                                f"{file}: model_store.download.allow_hf_fallback"),
        node_overrides=_overrides(top.get("node_overrides"), file))
    _check_paths(store, file)
    return store


def _staging(body: Any, file: str, path: str) -> dict[str, Any]:
    """The keys a `staging` mapping gives, typed (a partial one for an override)."""
    out: dict[str, Any] = {}
    for key, value in mapping(body, file, path, frozenset(_STAGING)).items():
        where = f"{file}: {path}.{key}"
        if _STAGING[key] is Path:
            out[key] = absolute_path(value, where)
        else:
            out[key] = typed(value, _STAGING[key], where)
    keep = out.get("staging_keep_recent_gb")
    if keep is not None and not 0 <= keep < float("inf"):
        raise ConfigError(f"{file}: {path}.staging_keep_recent_gb must be >= 0, got {keep}")
    return out


def _overrides(body: Any, file: str) -> tuple[tuple[str, StagingOverride], ...]:
    if body is None:
        return ()
    if not isinstance(body, dict):
        raise ConfigError(f"{file}: model_store.node_overrides must be a mapping of node name or id")
    out: list[tuple[str, StagingOverride]] = []
    for key, value in body.items():
        path = f"model_store.node_overrides.{key}"
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(f"{file}: {path}: a node name or node id must be a non-empty string")
        if any(same_name(key, seen) for seen, _ in out):
            raise ConfigError(f"{file}: {path}: another override names the same node")
        inner = mapping(value, file, path, _OVERRIDE)
        out.append((key, StagingOverride(**_staging(inner.get("staging"), file, f"{path}.staging"))))
    return tuple(out)


def _relation(staging: Path, store: Path) -> str | None:
    """How a staging dir overlaps the store, if it does (lexical paths)."""
    if staging == store:
        return "equal to"
    if store in staging.parents:
        return "inside"
    if staging in store.parents:
        return "a parent of"
    return None


def _check_paths(store: ModelStoreConfig, file: str) -> None:
    """Staging into the store would evict (delete) the authoritative copies: refused."""
    cases = [("model_store.staging.node_cache_path", store.staging.node_cache_path)]
    cases += [(f"model_store.node_overrides.{key}.staging.node_cache_path", o.node_cache_path)
              for key, o in store.node_overrides if o.node_cache_path is not None]
    for key, path in cases:
        if (how := _relation(path, store.store_path)) is not None:
            raise ConfigError(f"{file}: {key} ({path}) must not be {how} model_store.store_path "
                              f"({store.store_path}): staged copies are deleted by eviction")


def _names_this(key: str, names: tuple[str, ...], node_id: str) -> bool:
    return key == node_id or any(same_name(key, n) for n in names)


def override_for(store: ModelStoreConfig, names: tuple[str, ...], node_id: str) -> StagingOverride | None:
    """This node's override: one keyed by its node id first, else by one of its names."""
    for key, override in store.node_overrides:
        if key == node_id:
            return override
    for key, override in store.node_overrides:
        if _names_this(key, names, ""):
            return override
    return None


def staging_for(store: ModelStoreConfig, names: tuple[str, ...], node_id: str) -> StagingConfig:
    """The base `staging` with this node's override merged over it (only the keys it gives)."""
    override = override_for(store, names, node_id)
    if override is None:
        return store.staging
    given = {f.name: v for f in fields(override) if (v := getattr(override, f.name)) is not None}
    return replace(store.staging, **given)


def is_store_host(store: ModelStoreConfig, names: tuple[str, ...], node_id: str) -> bool:
    """`store_host` names this node (by id, or by one of its names without case)."""
    return _names_this(store.store_host, names, node_id)


# ---- the roles' slice: command-line arguments and back ---------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class StoreSlice(Argv):
    """One node's store settings as its `store`, `worker` and `api` roles get them (a role's
    `store: StoreSlice | None`; None: no store): `node_overrides` already applied and whether
    this node is the store host decided, so a role never sees another node's override and
    every role agrees on the host."""

    store_host: str  # a node name or node id
    store_path: Path
    store_http_host: str | None = None
    store_port: int = DEFAULT_STORE_PORT
    staging_enabled: bool = True
    staging_root: Path | None = None  # None: <home>/staging
    staging_keep_gb: float = DEFAULT_KEEP_GB
    cleanup_on_deactivate: bool = True
    allow_hf_fallback: bool = True
    is_store_host: bool | None = None  # None: decided by name (a store role started by hand)

    @classmethod
    def for_node(cls, store: ModelStoreConfig | None, names: tuple[str, ...], node_id: str) -> StoreSlice | None:
        """This node's slice (`names`: every name the config may call it by,
        `node_identity.names`); None when the store is absent or off."""
        if store is None or not store.enabled:
            return None
        staging = staging_for(store, names, node_id)
        return cls(store_host=store.store_host, store_path=store.store_path, store_http_host=store.store_http_host,
                   store_port=store.store_port, staging_enabled=staging.enabled,
                   staging_root=staging.node_cache_path, staging_keep_gb=staging.staging_keep_recent_gb,
                   cleanup_on_deactivate=staging.cleanup_on_deactivate, allow_hf_fallback=store.allow_hf_fallback,
                   is_store_host=is_store_host(store, names, node_id))

    def config(self, home: Path) -> ModelStoreConfig:
        """As this node's settings (no overrides left to apply)."""
        staging = StagingConfig(enabled=self.staging_enabled, node_cache_path=self.staging_root or home / STAGING_DIR,
                                cleanup_on_deactivate=self.cleanup_on_deactivate,
                                staging_keep_recent_gb=self.staging_keep_gb)
        return ModelStoreConfig(store_host=self.store_host, store_path=self.store_path, staging=staging,
                                store_http_host=self.store_http_host, store_port=self.store_port,
                                allow_hf_fallback=self.allow_hf_fallback)
