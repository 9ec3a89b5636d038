"""Every role's command line, declared once: a frozen dataclass per role (`node/argv.py`).

The supervisor builds each child's arguments from these (`tree.py` from the node's
configuration, `child.py` the part every child shares; a runner's placement comes from the
worker) and each role reads them back with `from_argv`, so the two sides agree by construction.
Defaults are what a role falls back to when started by hand; the supervisor always passes the
node's configured values. Pure data: imported by the supervisor and by the roles alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Self

from skulk.node.argv import Argv, from_known_argv, prefixed
from skulk.node.logsetup import LogSettings
from skulk.node.model_store import StoreSlice, same_name

MIB, GIB = 1024 ** 2, 1024 ** 3


def advertised(listen: str) -> str:
    """The address local peers reach a role at when it listens on every interface."""
    return "127.0.0.1" if listen in ("0.0.0.0", "::", "") else listen


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildArgs(Argv):
    """What every child gets first (`ChildProcess.spawn`); its role's own arguments follow."""

    child_id: str
    title: str
    home: Path
    run_dir: Path
    heartbeat_s: float = 1.0
    log: LogSettings = prefixed("log-", LogSettings())
    key_file: str = ""  # the cluster key every TCP socket is secured with (`wire/curve.py`); "": open

    @classmethod
    def split(cls, argv: list[str]) -> tuple[Self, list[str]]:
        """These arguments, and the rest (the role's own), in order."""
        return from_known_argv(cls, argv)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiArgs(Argv):
    listen: str = "0.0.0.0"
    port: int
    node_id: str
    workers: int = 1
    threads: int = 128
    keepalive: float  # api.keepalive_s
    stall_timeout: float  # api.stall_timeout_s
    resume_attempts: int = 2  # api.resume.max_attempts
    resume_wait: float = 30.0  # api.resume.wait_s
    open_admin: bool = False  # keys are read from `config_file`, never given here (`ps` shows arguments)
    max_body_mb: float = 32.0
    max_messages: int = 1024
    max_streams_per_key: int = 64
    write_timeout: float = 60.0
    max_output_tokens: int = 4096  # api.max_output_tokens: a request that names no budget
    config_file: str = ""  # the node's skulk.yaml (GET/PUT /config, api.keys)
    namespace: str = "skulk"  # the cluster's (`/admin/clusters`, diagnostics)
    store: StoreSlice | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GossipArgs(Argv):
    listen: str = "0.0.0.0"
    port: int
    master_port: int
    node_id: str
    node_name: str  # shown as friendlyName; unique in the cluster
    derived_name: str = ""  # given no name: the one to take where `node_name` is held
    started: float = 0.0  # the node's start (epoch s): settles name clashes
    namespace: str = "skulk"
    peers: tuple[str, ...] = ()  # bootstrap peers, host:port
    peer_timeout: float = 1.5
    discovery_port: int  # 0: no LAN discovery
    version: str = "0"
    api_port: int = 0  # advertised so peers can fan out to this node's API
    engine: str = "auto"  # runner.engine: which installed engines the node offers (`wire/engines.py`)
    accel: str = ""  # SKULK_ACCEL: the accelerator forced (`wire/accelerator.py`)


@dataclass(frozen=True, slots=True, kw_only=True)
class MasterArgs(Argv):
    listen: str = "0.0.0.0"
    port: int
    node_id: str
    election_timeout: float = 3.0
    recreate_backoff: float = 0.5
    replace_lost_after: float = 2.0  # 0: a lost node's instances are not placed again
    drain_timeout: float = 0.0  # node.drain_timeout_s (0: no drain)
    config_file: str = ""  # the node's skulk.yaml (kept equal to the cluster's)
    tracing_enabled: bool = False  # a new cluster's first switch
    place: tuple[str, ...] = ()  # models to place once the cluster forms

    @property
    def advertise(self) -> str:
        return advertised(self.listen)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreRoleArgs(Argv):
    listen: str = "0.0.0.0"  # where the store's HTTP server binds
    node_id: str = ""
    node_name: str = ""
    store: StoreSlice | None = None

    def serves_store(self) -> bool:
        """Whether this node serves the store: as the supervisor decided, else by name."""
        if self.store is None:
            return False
        if self.store.is_store_host is not None:
            return self.store.is_store_host
        return self.store.store_host == self.node_id or (
            bool(self.node_name) and same_name(self.store.store_host, self.node_name))


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerArgs(Argv):
    node_id: str
    listen: str = "0.0.0.0"
    store: StoreSlice | None = None  # None: models come from the models dir only

    @property
    def advertise(self) -> str:
        return advertised(self.listen)


@dataclass(frozen=True, slots=True, kw_only=True)
class EventlogArgs(Argv):
    """How the event log stays small (`services/eventlog/retention.py` decides with these, as
    its `Retention`): the defaults bound its disk use; tests pass small ones."""

    ring_bytes: int = 256 * MIB
    ring_keep: int = 20_000
    ring_check_every: int = 4096
    archives_max: int = 5
    archives_bytes: int = GIB
    floor_bytes: int = 2 * GIB
    floor_check_every: int = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class JanitorArgs(Argv):
    trace_retention_days: float = 3.0  # <= 0: traces are kept


@dataclass(frozen=True, slots=True, kw_only=True)
class RunnerSettings(Argv):
    """A runner's part of the node's configuration (the runners' template, `tree.py`)."""

    warmup_deadline: float = 300.0
    group_connect_deadline: float = 120.0
    max_batch: int = 16
    queue_max: int = 64
    prefill_chunk: int = 256
    prefix_cache_mb: int = 512
    quantized: str = "auto"  # a QuantMode
    spec_mode: str = ""  # a SpecMode; "": the model card's choice
    spec_draft_tokens: int = 4
    spec_max_streams: int = 1
    spec_drafter: str = ""
    threads: int = 0  # llama.cpp's compute threads (0: one per core)
    kv_tokens: int = 0  # llama.cpp's KV cache for all rows (0: the engine's default)
    accel: str = ""  # SKULK_ACCEL: the accelerator forced (`wire/accelerator.py`)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunnerPlacement(Argv):
    """Which runner this is: its instance, model and rank (the worker's plan)."""

    runner_id: str
    instance_id: str
    node_id: str
    model_id: str
    model_dir: Path
    listen: str = "127.0.0.1"
    advertise: str = "127.0.0.1"
    rank: int = 0
    world_size: int = 1
    start_layer: int = 0
    end_layer: int = 0
    sharding: str = "Pipeline"
    hosts: tuple[str, ...] = ()  # "ip:port" per rank: more than one is a sharded instance
    split: tuple[int, ...] = ()  # layers per rank
    control: str = ""  # rank 0's lock-step port, "ip:port"
    embedding: bool = False  # the card's task: serve `Embed`
    engine: str = "mlx"  # the instance's EngineKind


@dataclass(frozen=True, slots=True, kw_only=True)
class RunnerArgs(Argv):
    """What a runner reads: its placement (from the worker) and the node's settings (from the
    template), given one after the other on its command line."""

    placement: RunnerPlacement
    settings: RunnerSettings = RunnerSettings()
