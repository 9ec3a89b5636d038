"""The node's process tree, declared as data from its configuration (nothing else here)."""

from __future__ import annotations

from pathlib import Path

from skulk.node.argv import Argv
from skulk.node.config import NodeConfig
from skulk.node.logsetup import LogSettings
from skulk.node.model_store import StoreSlice
from skulk.node.node_identity import names
from skulk.node.role_args import (
    ApiArgs,
    EventlogArgs,
    GossipArgs,
    JanitorArgs,
    MasterArgs,
    RunnerSettings,
    StoreRoleArgs,
    WorkerArgs,
)
from skulk.supervisor.spec import ChildSpec, SupervisorSpec
from skulk.wire.version import skulk_version

ROLES = ("bus", "eventlog", "store", "gossip", "master", "worker", "api", "janitor")
"""Permanent roles in start order; stop order is the reverse."""

RUNNER_MODULE = "skulk.services.runner"
RUNNER_STACK = ("skulk.services.runner.prelude", "mlx.core", "mlx.nn", "mlx_lm", "mlx_lm.utils",
                "mlx_lm.generate", "mlx_lm.models.cache")
"""What a standby runner imports before it is needed (`supervisor/zygote.py`): the runner's
prelude first (OpenBLAS, transformers' cached index), then the engine (mlx-lm's import alone is
seconds on a CPU: transformers)."""
GUNICORN_TICK_S = 1.0
"""The api beats from gunicorn's arbiter loop, which wakes once a second at most."""
RUNNER_READY_GRACE_S = 10.0
RUNNER_SHUTDOWN_S = 2.0
"""A runner has nothing to flush on stop (its memory goes with the process), and a rank blocked
in a collective whose peer died cannot even see SIGTERM: SIGKILL follows after 2 s."""
RUNNER_MIN_LIVENESS = 10
"""A runner beats between decode steps, and a step of a sharded instance may wait on its peer
ranks inside a collective (longer on a loaded machine): runners get at least 10 beats."""


def config_file(cfg: NodeConfig) -> Path:
    """The file `GET`/`PUT /config` and the cluster sync edit: the one the node was started
    with (`--config`, `$SKULK_CONFIG`, `<home>/skulk.yaml`), else `<home>/skulk.yaml`."""
    return (cfg.config_path or cfg.home / "skulk.yaml").absolute()


def role_settings(cfg: NodeConfig, role: str, node_id: str, started: float = 0.0) -> Argv | None:
    """Each role's own slice of the configuration (`started`: when the node's root process
    started, which gossip needs to settle a clash of node names); None for a role with none."""
    store = StoreSlice.for_node(cfg.model_store, names(cfg), node_id)
    if role == "api":
        return ApiArgs(listen=cfg.listen, port=cfg.api_port, node_id=node_id, workers=cfg.api_workers,
                       threads=cfg.api_threads, keepalive=cfg.api_keepalive_s, stall_timeout=cfg.api_stall_timeout_s,
                       resume_attempts=cfg.api_resume.max_attempts, resume_wait=cfg.api_resume.wait_s,
                       open_admin=cfg.api_open_admin, max_body_mb=cfg.api_max_body_mb,
                       max_messages=cfg.api_max_messages, max_streams_per_key=cfg.api_max_streams_per_key,
                       write_timeout=cfg.api_write_timeout_s, max_output_tokens=cfg.api_max_output_tokens,
                       config_file=str(config_file(cfg)),
                       namespace=cfg.namespace, store=store)
    if role == "gossip":
        return GossipArgs(listen=cfg.listen, port=cfg.cluster_port, master_port=cfg.cluster_port + 1,
                          node_id=node_id, node_name=cfg.node_name, derived_name=cfg.derived_name, started=started,
                          namespace=cfg.namespace, peers=cfg.bootstrap_peers, peer_timeout=cfg.peer_timeout_s,
                          discovery_port=cfg.discovery_port, version=skulk_version(), api_port=cfg.api_port,
                          engine=cfg.engine, accel=cfg.accel)
    if role == "master":
        return MasterArgs(listen=cfg.listen, port=cfg.cluster_port + 1, node_id=node_id,
                          election_timeout=cfg.election_timeout_s, recreate_backoff=cfg.recreate_backoff_s,
                          replace_lost_after=cfg.replace_lost_after_s if cfg.replace_lost else 0.0,
                          drain_timeout=cfg.drain_timeout_s, config_file=str(config_file(cfg)),
                          tracing_enabled=cfg.tracing_enabled, place=cfg.place)
    if role == "store":
        return StoreRoleArgs(listen=cfg.listen, node_id=node_id, node_name=cfg.node_name, store=store)
    if role == "worker":
        return WorkerArgs(node_id=node_id, listen=cfg.listen, store=store)
    if role == "eventlog":
        return EventlogArgs(ring_bytes=int(cfg.eventlog_ring_mb * 2 ** 20), ring_keep=cfg.eventlog_ring_keep,
                            archives_max=cfg.eventlog_archives, archives_bytes=int(cfg.eventlog_archives_gb * 2 ** 30),
                            floor_bytes=int(cfg.eventlog_floor_gb * 2 ** 30),
                            floor_check_every=cfg.eventlog_floor_check_every)
    if role == "janitor":
        return JanitorArgs(trace_retention_days=cfg.trace_retention_days)
    return None


def role_args(cfg: NodeConfig, role: str, node_id: str, started: float = 0.0) -> tuple[str, ...]:
    """`role_settings` as the role's command-line arguments."""
    settings = role_settings(cfg, role, node_id, started)
    return settings.to_argv() if settings is not None else ()


def runner_settings(cfg: NodeConfig) -> RunnerSettings:
    """Every runner's part of the configuration (its placement comes from the worker)."""
    return RunnerSettings(warmup_deadline=cfg.warmup_deadline_s, group_connect_deadline=cfg.group_connect_deadline_s,
                          max_batch=cfg.max_batch, queue_max=cfg.queue_max, prefill_chunk=cfg.prefill_chunk,
                          prefix_cache_mb=cfg.prefix_cache_mb, quantized=cfg.quantized, spec_mode=cfg.spec_mode,
                          spec_draft_tokens=cfg.spec_draft_tokens, spec_max_streams=cfg.spec_max_streams,
                          spec_drafter=cfg.spec_drafter, threads=cfg.threads, kv_tokens=cfg.kv_tokens,
                          accel=cfg.accel)


def log_settings(cfg: NodeConfig) -> LogSettings:
    """The node's logging settings; every process (the supervisor too) logs with these."""
    return LogSettings(json=cfg.log_json, node=cfg.node_name, file_mb=cfg.log_file_mb, files=cfg.log_files)


def key_file(cfg: NodeConfig) -> str:
    """The cluster key file as every child is given it (resolved: a child's working directory
    is not the operator's); "" for an open cluster."""
    return str(Path(cfg.cluster_key_file).expanduser().resolve()) if cfg.cluster_key_file else ""


def build_tree(cfg: NodeConfig, node_id: str, started: float = 0.0) -> SupervisorSpec:
    logs = log_settings(cfg)
    key = key_file(cfg)

    def child(role: str) -> ChildSpec:
        return ChildSpec(id=role, module=f"skulk.services.{role}", title=role,
                         args=role_args(cfg, role, node_id, started), log=logs, key_file=key,
                         restart="permanent",
                         shutdown_s=cfg.shutdown_s, ready_timeout_s=cfg.ready_timeout_s,
                         heartbeat_s=max(cfg.heartbeat_s, GUNICORN_TICK_S) if role == "api"
                         else cfg.heartbeat_s, liveness=cfg.liveness)

    runner = ChildSpec(id="runner", module=RUNNER_MODULE, title="runner",
                       args=runner_settings(cfg).to_argv(), log=logs, key_file=key,
                       # never restarted here: the leader deletes a failed runner's instance
                       # (stopping its other ranks) and re-creates it with back-off
                       restart="temporary", shutdown_s=min(cfg.shutdown_s, RUNNER_SHUTDOWN_S),
                       # the runner enforces the warmup deadline itself (CRITICAL + exitcodes.WEDGED);
                       # the supervisor's ready deadline is the backstop just after it
                       ready_timeout_s=cfg.warmup_deadline_s + RUNNER_READY_GRACE_S,
                       heartbeat_s=cfg.heartbeat_s,
                       liveness=max(cfg.liveness, RUNNER_MIN_LIVENESS),
                       step_deadline_s=cfg.step_deadline_s)
    runners = SupervisorSpec(id="runners", strategy="simple_one_for_one",
                             intensity=cfg.runners_budget.intensity,
                             period_s=cfg.runners_budget.period_s, template=runner)
    return SupervisorSpec(id="root", strategy="one_for_one",
                          intensity=cfg.root_budget.intensity, period_s=cfg.root_budget.period_s,
                          children=(*(child(r) for r in ROLES), runners))
