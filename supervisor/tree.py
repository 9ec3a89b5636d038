"""The node's process tree, declared as data from its configuration (nothing else here)."""

from __future__ import annotations

from pathlib import Path

from skulk.supervisor.config import NodeConfig
from skulk.supervisor.logsetup import LogSettings
from skulk.supervisor.model_store import store_argv
from skulk.supervisor.node_identity import names
from skulk.supervisor.spec import ChildSpec, SupervisorSpec
from skulk.wire.version import skulk_version

ROLES = ("bus", "eventlog", "store", "gossip", "master", "worker", "api", "janitor")
"""Permanent roles in start order; stop order is the reverse."""

GUNICORN_TICK_S = 1.0
RUNNER_READY_GRACE_S = 10.0
RUNNER_SHUTDOWN_S = 2.0
"""A runner has nothing to flush on stop (its memory goes with the process), and a rank blocked
in a collective whose peer died cannot even see SIGTERM: SIGKILL follows after 2 s."""
RUNNER_MIN_LIVENESS = 10
"""A runner beats between decode steps, and a step of a sharded instance may wait on its peer
ranks inside a collective (longer on a loaded machine): runners get at least 10 beats."""
"""The api beats from gunicorn's arbiter loop, which wakes once a second at most."""



def config_file(cfg: NodeConfig) -> Path:
    """The file `GET`/`PUT /config` and the cluster sync edit: the one the node was started
    with (`--config`, `$SKULK_CONFIG`, `<home>/skulk.yaml`), else `<home>/skulk.yaml`."""
    return (cfg.config_path or cfg.home / "skulk.yaml").absolute()


def role_args(cfg: NodeConfig, role: str, node_id: str, started: float = 0.0) -> tuple[str, ...]:
    """Each role's own slice of the configuration, as command-line arguments (`started`: when
    the node's root process started, which gossip needs to settle a clash of node names)."""
    if role == "api":
        return ("--listen", cfg.listen, "--port", str(cfg.api_port), "--node-id", node_id,
                "--workers", str(cfg.api_workers), "--threads", str(cfg.api_threads),
                "--keepalive", repr(cfg.api_keepalive_s), "--stall-timeout", repr(cfg.api_stall_timeout_s),
                # no keys here (`ps` shows arguments): the API reads `api.keys` from the file itself
                "--open-admin", str(int(cfg.api_open_admin)), "--max-body-mb", repr(cfg.api_max_body_mb),
                "--max-messages", str(cfg.api_max_messages),
                "--max-streams-per-key", str(cfg.api_max_streams_per_key),
                "--write-timeout", repr(cfg.api_write_timeout_s),
                "--config-file", str(config_file(cfg)),
                "--namespace", cfg.namespace, *store_argv(cfg.model_store, names(cfg), node_id))
    if role == "gossip":
        return ("--listen", cfg.listen, "--port", str(cfg.cluster_port),
                "--master-port", str(cfg.cluster_port + 1), "--node-id", node_id,
                "--node-name", cfg.node_name, "--derived-name", cfg.derived_name, "--started", repr(started),
                "--namespace", cfg.namespace, "--peers", ",".join(cfg.bootstrap_peers),
                "--peer-timeout", repr(cfg.peer_timeout_s),
                "--discovery-port", str(cfg.discovery_port), "--version", skulk_version(),
                "--api-port", str(cfg.api_port))
    if role == "master":
        return ("--listen", cfg.listen, "--port", str(cfg.cluster_port + 1), "--node-id", node_id,
                "--election-timeout", repr(cfg.election_timeout_s),
                "--recreate-backoff", repr(cfg.recreate_backoff_s), "--drain-timeout", repr(cfg.drain_timeout_s),
                "--config-file", str(config_file(cfg)),
                "--tracing-enabled", str(int(cfg.tracing_enabled)),
                *(a for m in cfg.place for a in ("--place", m)))
    if role == "store":
        return ("--listen", cfg.listen, "--node-id", node_id, "--node-name", cfg.node_name,
                *store_argv(cfg.model_store, names(cfg), node_id))
    if role == "worker":
        return ("--node-id", node_id, "--listen", cfg.listen,
                *store_argv(cfg.model_store, names(cfg), node_id))
    if role == "eventlog":
        mib, gib = 1024 ** 2, 1024 ** 3
        return ("--ring-bytes", str(int(cfg.eventlog_ring_mb * mib)), "--ring-keep", str(cfg.eventlog_ring_keep),
                "--archives-max", str(cfg.eventlog_archives),
                "--archives-bytes", str(int(cfg.eventlog_archives_gb * gib)),
                "--floor-bytes", str(int(cfg.eventlog_floor_gb * gib)),
                "--floor-check-every", str(cfg.eventlog_floor_check_every))
    if role == "janitor":
        return ("--trace-retention-days", repr(cfg.trace_retention_days))
    return ()


def log_settings(cfg: NodeConfig) -> LogSettings:
    """The node's logging settings; every process (the supervisor too) logs with these."""
    return LogSettings(json=cfg.log_json, node=cfg.node_name, file_mb=cfg.log_file_mb, files=cfg.log_files)


def build_tree(cfg: NodeConfig, node_id: str, started: float = 0.0) -> SupervisorSpec:
    logs = log_settings(cfg).argv()  # every role's, parsed by services/base.py

    def child(role: str) -> ChildSpec:
        return ChildSpec(id=role, module=f"skulk.services.{role}", title=role,
                         args=(*role_args(cfg, role, node_id, started), *logs), restart="permanent",
                         shutdown_s=cfg.shutdown_s, ready_timeout_s=cfg.ready_timeout_s,
                         heartbeat_s=max(cfg.heartbeat_s, GUNICORN_TICK_S) if role == "api"
                         else cfg.heartbeat_s, liveness=cfg.liveness)

    runner = ChildSpec(id="runner", module="skulk.services.runner", title="runner",
                       args=("--warmup-deadline", repr(cfg.warmup_deadline_s),
                             "--group-connect-deadline", repr(cfg.group_connect_deadline_s),
                             "--max-batch", str(cfg.max_batch), "--queue-max", str(cfg.queue_max),
                             "--prefill-chunk", str(cfg.prefill_chunk),
                             "--prefix-cache-mb", str(cfg.prefix_cache_mb), "--quantized", cfg.quantized,
                             "--spec-mode", cfg.spec_mode, "--spec-draft-tokens", str(cfg.spec_draft_tokens),
                             "--spec-max-streams", str(cfg.spec_max_streams), "--spec-drafter", cfg.spec_drafter,
                             *logs),
                       # never restarted here: the leader deletes a failed runner's instance
                       # (stopping its other ranks) and re-creates it with back-off
                       restart="temporary", shutdown_s=min(cfg.shutdown_s, RUNNER_SHUTDOWN_S),
                       # the runner enforces the warmup deadline itself (CRITICAL + exit 86);
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
