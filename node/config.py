"""The node's configuration, loaded once into frozen dataclasses.

Precedence: defaults < `skulk.yaml` (`--config`, `$SKULK_CONFIG`, else `<home>/skulk.yaml`)
< environment (`SKULK_*`) < command line. Unknown keys and wrong types are a `ConfigError`
(the node exits with `exitcodes.CONFIG_ERROR` and says which key). Each child receives only
its own slice as arguments; no child reads YAML or the environment for configuration.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from skulk.cluster.engines import LLAMA_KV_TOKENS
from skulk.node import api_keys, model_store
from skulk.node.api_keys import ApiKey
from skulk.node.config_values import ConfigError, typed
from skulk.node.model_store import ModelStoreConfig
from skulk.wire import curve

__all__ = ["Budget", "ConfigError", "ModelStoreConfig", "NodeConfig", "default_home", "from_mapping", "load",
           "validate", "yaml_fields"]

NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
"""A node name: what a host name may hold (it defaults to the host name)."""


MIN_KV_TOKENS = 256
"""The smallest `runner.kv_tokens`: llama.cpp sizes its cache in steps of 256 tokens."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume:
    """`api.resume`: a request whose instance is lost mid-answer goes on elsewhere at most
    `max_attempts` times (0: never), each time waiting at most `wait_s` for a serving instance."""

    max_attempts: int = 2
    wait_s: float = 30.0


def parse_resume(value: Any, where: str) -> Resume:
    if not isinstance(value, dict) or set(value) - {"max_attempts", "wait_s"}:
        raise ConfigError(f"{where} takes max_attempts and wait_s only")
    resume = Resume(max_attempts=typed(value.get("max_attempts", 2), int, f"{where}.max_attempts"),
                    wait_s=typed(value.get("wait_s", 30.0), float, f"{where}.wait_s"))
    if not 0 <= resume.max_attempts <= 100 or not 0 < resume.wait_s <= 3600:
        raise ConfigError(f"{where}: max_attempts must be in 0..100 and wait_s in (0, 3600]")
    return resume


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    intensity: int
    period_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    home: Path
    node_name: str = ""  # unique in the cluster; "" until loaded: then the host name
    host_name: str = ""  # set where the node was given no name: the host name it is called by
    derived_name: str = ""  # such a node's name where its host name is taken (node_identity.py)
    api_port: int = 52415
    cluster_port: int = 52416
    listen: str = "0.0.0.0"
    namespace: str = "skulk"
    bootstrap_peers: tuple[str, ...] = ()
    peer_timeout_s: float = 1.5
    discovery_port: int = 52417
    election_timeout_s: float = 3.0
    heartbeat_s: float = 1.0
    liveness: int = 3
    ready_timeout_s: float = 15.0
    shutdown_s: float = 5.0
    drain_timeout_s: float = 30.0  # an in-place restart waits this long at most for its runners' requests
    root_budget: Budget = field(default_factory=lambda: Budget(intensity=3, period_s=60.0))
    runners_budget: Budget = field(default_factory=lambda: Budget(intensity=5, period_s=30.0))
    warmup_deadline_s: float = 300.0
    step_deadline_s: float = 300.0  # one long step (a first-use compile, a big prefill) before a kill
    group_connect_deadline_s: float = 120.0
    recreate_backoff_s: float = 0.5
    replace_lost: bool = True  # a lost node's instances are placed again on the nodes that remain
    replace_lost_after_s: float = 2.0  # ... this long after the node is declared lost
    max_batch: int = 16
    queue_max: int = 64
    prefill_chunk: int = 256
    prefix_cache_mb: int = 512
    quantized: str = "auto"  # a quantized model on a GPU: auto (the faster of it and bf16) | keep | dequantize
    engine: str = "auto"  # the engines this node's runners may use: auto (every one installed) | mlx | llama_cpp
    threads: int = 0  # llama.cpp's compute threads per runner (0: one per core it may run on)
    kv_tokens: int = 0  # llama.cpp's KV cache per runner, all rows together (0: 16,384, what placement counts)
    accel: str = ""  # SKULK_ACCEL=cpu|cuda: the accelerator forced ("": mlx's choice); given to gossip and runners
    spec_mode: str = ""  # speculative decoding: off | prompt_lookup | drafter ("": as the model's card says)
    spec_drafter: str = ""  # drafter mode: the drafter's model id ("": the one the model's card names)
    spec_draft_tokens: int = 4
    spec_max_streams: int = 1
    api_workers: int = 1
    api_threads: int = 128
    api_keepalive_s: float = 10.0
    api_stall_timeout_s: float = 120.0
    api_resume: Resume = field(default_factory=Resume)
    api_keys: tuple[ApiKey, ...] = field(default=(), repr=False)  # read by the API itself from the file
    api_open_admin: bool = False  # no keys on a non-loopback address: admin routes open to everyone
    api_max_body_mb: float = 32.0
    api_max_messages: int = 1024
    api_max_streams_per_key: int = 64
    api_write_timeout_s: float = 60.0  # a client that reads nothing of its answer for this long is dropped
    api_max_output_tokens: int = 4096  # the output budget of a request that names none (at most what fits)
    trace_retention_days: float = 3.0
    cluster_key_file: str = ""  # CurveZMQ cluster key (`skulk cluster keygen`); "" = open (loopback only)
    tracing_enabled: bool = False  # the cluster's initial tracing state (`PUT /v1/tracing` changes it)
    log_json: bool = False  # `logging.enabled` or SKULK_LOGGING_EXTERNAL: JSON lines on stdout too
    log_ingest_url: str = ""  # upstream's `logging.ingest_url`: for the shipper; Skulk spawns none
    log_file_mb: int = 10
    log_files: int = 5
    eventlog_ring_mb: float = 256.0  # compact the active file past this, keeping the newest events
    eventlog_ring_keep: int = 20_000
    eventlog_archives: int = 5
    eventlog_archives_gb: float = 1.0
    eventlog_floor_gb: float = 2.0  # free space below this: counting only
    eventlog_floor_check_every: int = 1024
    place: tuple[str, ...] = ()
    config_path: Path | None = None
    model_store: ModelStoreConfig | None = None  # None: no store, the local models dir only
    hf_token: str | None = field(default=None, repr=False)  # a secret: kept out of logs


# yaml section -> {yaml key: (NodeConfig field, type)}
_YAML: dict[str, dict[str, tuple[str, type]]] = {
    "node": {"api_port": ("api_port", int), "cluster_port": ("cluster_port", int),
             "listen": ("listen", str), "name": ("node_name", str),
             "drain_timeout_s": ("drain_timeout_s", float)},
    "cluster": {"namespace": ("namespace", str), "bootstrap_peers": ("bootstrap_peers", list),
                "peer_timeout_s": ("peer_timeout_s", float), "discovery_port": ("discovery_port", int),
                "election_timeout_s": ("election_timeout_s", float),
                "key_file": ("cluster_key_file", str)},
    "heartbeat": {"interval_s": ("heartbeat_s", float), "liveness": ("liveness", int)},
    "children": {"ready_timeout_s": ("ready_timeout_s", float), "shutdown_s": ("shutdown_s", float)},
    "api": {"workers": ("api_workers", int), "threads": ("api_threads", int),
            "keepalive_s": ("api_keepalive_s", float), "stall_timeout_s": ("api_stall_timeout_s", float),
            "keys": ("api_keys", list), "open_admin": ("api_open_admin", bool),
            "max_body_mb": ("api_max_body_mb", float), "max_messages": ("api_max_messages", int),
            "max_streams_per_key": ("api_max_streams_per_key", int),
            "write_timeout_s": ("api_write_timeout_s", float), "resume": ("api_resume", dict),
            "max_output_tokens": ("api_max_output_tokens", int)},
    "runner": {"warmup_deadline_s": ("warmup_deadline_s", float), "step_deadline_s": ("step_deadline_s", float),
               "group_connect_deadline_s": ("group_connect_deadline_s", float),
               "recreate_backoff_s": ("recreate_backoff_s", float),
               "max_batch": ("max_batch", int), "queue_max": ("queue_max", int),
               "prefill_chunk": ("prefill_chunk", int), "prefix_cache_mb": ("prefix_cache_mb", int),
               "quantized": ("quantized", str), "engine": ("engine", str), "threads": ("threads", int),
               "kv_tokens": ("kv_tokens", int)},
    "placement": {"replace_lost": ("replace_lost", bool), "replace_lost_after_s": ("replace_lost_after_s", float)},
    "speculative": {"mode": ("spec_mode", str), "num_draft_tokens": ("spec_draft_tokens", int),
                    "max_streams": ("spec_max_streams", int), "drafter": ("spec_drafter", str)},
    "tracing": {"retention_days": ("trace_retention_days", float), "enabled": ("tracing_enabled", bool)},
    "event_log": {"ring_mb": ("eventlog_ring_mb", float), "ring_keep": ("eventlog_ring_keep", int),
                  "archives_max": ("eventlog_archives", int), "archives_gb": ("eventlog_archives_gb", float),
                  "floor_gb": ("eventlog_floor_gb", float),
                  "floor_check_every": ("eventlog_floor_check_every", int)},
    "logging": {"enabled": ("log_json", bool), "ingest_url": ("log_ingest_url", str),
                "max_file_mb": ("log_file_mb", int), "max_files": ("log_files", int)},
}
_PARSED: dict[str, Callable[[Any, str], Any]] = {"api.keys": api_keys.parse, "api.resume": parse_resume}
"""Settings of `_YAML` whose value is more than a scalar or a list of strings: parsed whole."""
_BUDGETS = {"supervisor": "root_budget", "runners_supervisor": "runners_budget"}
_SECTIONS = {"model_store": "model_store"}
"""Sections parsed as a whole into one value (`node/model_store.py`)."""
_TOP: dict[str, tuple[str, type]] = {"hf_token": ("hf_token", str)}
"""Top-level scalar keys (upstream's `hf_token`: a secret, never shown or synced; see config_file)."""

_ENV: dict[str, tuple[str, type]] = {
    "SKULK_API_PORT": ("api_port", int),
    "SKULK_CLUSTER_PORT": ("cluster_port", int),
    "SKULK_NAMESPACE": ("namespace", str),
    "SKULK_NODE_NAME": ("node_name", str),
    "SKULK_BOOTSTRAP_PEERS": ("bootstrap_peers", list),
    "SKULK_WARMUP_DEADLINE_SECONDS": ("warmup_deadline_s", float),
    "SKULK_STEP_DEADLINE_SECONDS": ("step_deadline_s", float),
    "SKULK_GROUP_CONNECT_DEADLINE_SECONDS": ("group_connect_deadline_s", float),
    "SKULK_LOGGING_EXTERNAL": ("log_json", bool),  # upstream: 1 => JSON to stdout for Vector
    "SKULK_LOGGING_INGEST_URL": ("log_ingest_url", str),
    "SKULK_TRACING_ENABLED": ("tracing_enabled", bool),  # upstream: the initial cluster tracing state
    "SKULK_CLUSTER_KEY_FILE": ("cluster_key_file", str),  # wire/curve.py: every TCP socket secured
    "SKULK_MAX_OUTPUT_TOKENS": ("api_max_output_tokens", int),  # api.max_output_tokens
    "SKULK_ACCEL": ("accel", str),  # as `make` reads it: cpu keeps mlx on the CPU (wire/accelerator.py)
    "SKULK_RUNNER_THREADS": ("threads", int),  # runner.threads: llama.cpp's compute threads per runner
}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def yaml_fields() -> dict[str, str]:
    """Every setting of the file by its YAML path (`runner.max_batch`; a budget section and
    `hf_token` and `model_store` are one setting each) -> its NodeConfig field."""
    out = {f"{section}.{key}": name for section, keys in _YAML.items() for key, (name, _) in keys.items()}
    return out | dict(_BUDGETS) | dict(_SECTIONS) | {key: name for key, (name, _) in _TOP.items()}


def default_home() -> Path:
    return Path(os.environ.get("SKULK_HOME") or "~/.skulk").expanduser()


def _from_env(name: str, raw: str, kind: type) -> Any:
    if kind is bool:
        if raw.strip().lower() in _TRUE + _FALSE:
            return raw.strip().lower() in _TRUE
        raise ConfigError(f"{name}={raw!r}: expected 1/0, true/false, yes/no or on/off")
    try:
        return typed(kind(raw) if kind in (int, float) else raw, kind, name)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected {kind.__name__}") from None


def _from_yaml(path: Path, home: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    return from_mapping(data, str(path), home)


def from_mapping(data: Any, where: str, home: Path) -> dict[str, Any]:
    """A parsed `skulk.yaml` as NodeConfig field values; `where` prefixes every error (the
    file, or `config` for `PUT /config`, which validates with exactly this); `home` gives
    defaults that depend on it (the staging dir)."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: top level must be a mapping")
    out: dict[str, Any] = {}
    for section, body in data.items():
        if section in _TOP:
            name, kind = _TOP[section]
            if body is not None:
                out[name] = typed(body, kind, f"{where}: {section}")
            continue
        if section in _BUDGETS:
            if not isinstance(body, dict) or set(body) - {"intensity", "period_s"}:
                extra = sorted(set(body) - {"intensity", "period_s"}) if isinstance(body, dict) else []
                named = f"unknown key {section}.{extra[0]}: " if extra else ""
                raise ConfigError(f"{where}: {named}{section} takes intensity and period_s only")
            out[_BUDGETS[section]] = Budget(
                intensity=typed(body.get("intensity", 3), int, f"{where}: {section}.intensity"),
                period_s=typed(body.get("period_s", 60.0), float, f"{where}: {section}.period_s"))
            continue
        if section in _SECTIONS:
            out[_SECTIONS[section]] = model_store.parse(body, where, home)
            continue
        keys = _YAML.get(section)
        if keys is None:
            raise ConfigError(f"{where}: unknown section {section!r} (known: "
                              f"{', '.join(sorted([*_YAML, *_BUDGETS, *_SECTIONS, *_TOP]))})")
        if not isinstance(body, dict):
            raise ConfigError(f"{where}: section {section!r} must be a mapping")
        for key, value in body.items():
            if key not in keys:
                raise ConfigError(f"{where}: unknown key {section}.{key}")
            name, kind = keys[key]
            parser = _PARSED.get(f"{section}.{key}")
            out[name] = parser(value, f"{where}: {section}.{key}") if parser else \
                typed(value, kind, f"{where}: {section}.{key}")
    return out


def validate(data: Any, home: Path, where: str = "config") -> NodeConfig:
    """The node's config from this mapping and the defaults alone (what the file means, without
    environment or command line), with the same checks as at start: `ConfigError` names the key."""
    cfg = _named(replace(NodeConfig(home=home), **from_mapping(data, where, home)))
    _check(cfg)
    return cfg


def load(home: Path | None = None, config_path: Path | None = None,
         overrides: dict[str, Any] | None = None, env: Mapping[str, str] | None = None) -> NodeConfig:
    """Build the node's config; `overrides` are command-line values (None = not given)."""
    env = os.environ if env is None else env
    home = (home or default_home()).expanduser().resolve()
    path = config_path or (Path(env["SKULK_CONFIG"]) if env.get("SKULK_CONFIG") else None)
    if path is None and (home / "skulk.yaml").is_file():
        path = home / "skulk.yaml"
    values: dict[str, Any] = _from_yaml(path, home) if path else {}
    for name, (field_name, kind) in _ENV.items():
        if env.get(name):
            values[field_name] = _from_env(name, env[name], kind)
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = tuple(value) if isinstance(value, list) else value
    known = {f.name for f in fields(NodeConfig)}
    unknown = set(values) - known
    if unknown:
        raise ConfigError(f"unknown settings: {sorted(unknown)}")
    cfg = _named(replace(NodeConfig(home=home, config_path=path), **values))
    _check(cfg)
    return cfg


def _named(cfg: NodeConfig) -> NodeConfig:
    """Without a name of its own (`--node-name`, `node.name`, `SKULK_NODE_NAME`) a node is
    called by its host name (or, where that is taken in its cluster, a name derived from it:
    `node_identity.py`)."""
    if cfg.node_name:
        return cfg
    host = socket.gethostname()
    return replace(cfg, node_name=host, host_name=host)


def _check(cfg: NodeConfig) -> None:
    if not NODE_NAME.fullmatch(cfg.node_name):
        raise ConfigError(f"node.name (--node-name, SKULK_NODE_NAME) {cfg.node_name!r}: letters, digits, "
                          "'.', '_' and '-' only, starting with a letter or digit, at most 253")
    store = cfg.model_store
    if store is not None and store.enabled and model_store.same_name(store.store_host, cfg.node_name):
        taken = {cfg.api_port: "node.api_port", cfg.cluster_port: "node.cluster_port",
                 cfg.cluster_port + 1: "node.cluster_port + 1"}
        if store.store_port in taken:
            raise ConfigError(f"model_store.store_port {store.store_port} is this store host's "
                              f"{taken[store.store_port]}")
    for name in ("api_port", "cluster_port"):
        port = getattr(cfg, name)
        if not 1 <= port <= 65534:
            raise ConfigError(f"{name} must be in 1..65534, got {port}")
    if cfg.api_port in (cfg.cluster_port, cfg.cluster_port + 1):
        raise ConfigError("api_port must differ from cluster_port and cluster_port + 1")
    if cfg.peer_timeout_s <= 0 or cfg.election_timeout_s < 0 or not 0 <= cfg.discovery_port <= 65535:
        raise ConfigError("cluster: peer_timeout_s > 0, election_timeout_s >= 0, discovery_port 0..65535")
    if cfg.cluster_key_file:
        try:
            curve.load_key_file(Path(cfg.cluster_key_file).expanduser())
        except curve.KeyFileError as exc:
            raise ConfigError(f"cluster.key_file: {exc}") from None
    if cfg.heartbeat_s <= 0 or cfg.liveness < 1:
        raise ConfigError("heartbeat interval must be > 0 and liveness >= 1")
    if min(cfg.ready_timeout_s, cfg.shutdown_s, cfg.warmup_deadline_s, cfg.group_connect_deadline_s,
           cfg.step_deadline_s) <= 0:
        raise ConfigError("timeouts must be > 0")
    if not 0 <= cfg.drain_timeout_s <= 3600:
        raise ConfigError("node.drain_timeout_s must be in 0..3600 (0: restart without draining)")
    if not 0 < cfg.recreate_backoff_s <= 60:
        raise ConfigError("runner.recreate_backoff_s must be in (0, 60]")
    if not 0 < cfg.replace_lost_after_s <= 600:
        raise ConfigError("placement.replace_lost_after_s must be in (0, 600]")
    for budget in (cfg.root_budget, cfg.runners_budget):
        if budget.intensity < 0 or budget.period_s <= 0:
            raise ConfigError("restart budgets need intensity >= 0 and period_s > 0")
    if cfg.api_keepalive_s <= 0 or cfg.api_stall_timeout_s <= 0:
        raise ConfigError("api: keepalive_s and stall_timeout_s must be > 0")
    if not 1 <= cfg.max_batch <= 1024 or not 0 <= cfg.queue_max <= 100_000:
        raise ConfigError("runner.max_batch must be in 1..1024 and runner.queue_max in 0..100000")
    if not 16 <= cfg.prefill_chunk <= 65536 or not 0 <= cfg.prefix_cache_mb <= 1 << 20:
        raise ConfigError("runner.prefill_chunk must be in 16..65536 and runner.prefix_cache_mb in 0..1048576")
    if cfg.quantized not in ("auto", "keep", "dequantize"):
        raise ConfigError(f"runner.quantized must be auto, keep or dequantize, not {cfg.quantized!r}")
    if not 0 <= cfg.threads <= 1024:
        raise ConfigError("runner.threads must be in 0..1024 (0: one per core)")
    if cfg.kv_tokens and not MIN_KV_TOKENS <= cfg.kv_tokens <= LLAMA_KV_TOKENS:
        raise ConfigError(f"runner.kv_tokens must be 0 (the default, {LLAMA_KV_TOKENS}) or in "
                          f"{MIN_KV_TOKENS}..{LLAMA_KV_TOKENS}: placement counts {LLAMA_KV_TOKENS} for it")
    if cfg.engine not in ("auto", "mlx", "llama_cpp"):
        raise ConfigError(f"runner.engine must be auto, mlx or llama_cpp, not {cfg.engine!r}")
    if cfg.spec_mode not in ("", "off", "prompt_lookup", "drafter"):
        raise ConfigError(f"speculative.mode must be off, prompt_lookup or drafter, not {cfg.spec_mode!r}")
    if not 1 <= cfg.spec_draft_tokens <= 32 or not 1 <= cfg.spec_max_streams <= 1:
        raise ConfigError("speculative.num_draft_tokens must be in 1..32 and speculative.max_streams 1")
    if cfg.api_workers < 1 or cfg.api_threads < 1:
        raise ConfigError("api workers and threads must be >= 1")
    if not 0 < cfg.api_max_body_mb <= 4096 or not 1 <= cfg.api_max_messages <= 1_000_000 \
            or not 1 <= cfg.api_max_streams_per_key <= 100_000 or cfg.api_write_timeout_s <= 0:
        raise ConfigError("api: max_body_mb must be in (0, 4096], max_messages in 1..1000000, "
                          "max_streams_per_key in 1..100000 and write_timeout_s > 0")
    if not 1 <= cfg.api_max_output_tokens <= 10_000_000:
        raise ConfigError("api.max_output_tokens must be in 1..10000000")
    if not 1 <= cfg.log_file_mb <= 10240 or not 1 <= cfg.log_files <= 1000:
        raise ConfigError("logging.max_file_mb must be in 1..10240 and logging.max_files in 1..1000 "
                          "(files rotate by size; at least one old file is kept)")
