"""The cluster-wide `skulk.yaml`: the leader turns `SetConfig` into a `ConfigChanged` event (so
the config is replicated state that late joiners and new leaders have), and every master,
leader or follower, writes its node's file when the state holds a config it has not written
yet, keeping the node's own secrets. Decisions are pure; `ConfigFile` does the file IO."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from skulk.cluster.state import Event, State
from skulk.node import config_file
from skulk.node.config import ConfigError
from skulk.wire.commands import CommandAccepted, CommandRejected, RejectReason, Reply
from skulk.wire.config_sync import MAX_CONFIG_BYTES, ClusterConfig, ConfigChanged, SetConfig

log = logging.getLogger("skulk.master")


def set_config(state: State, cmd: SetConfig, now: float) -> tuple[Reply, list[Event]]:
    """Leader: accept a config as the next version, validated again as the node would at start
    (a 422 naming the key otherwise) and with any secret stripped, whoever sent it."""
    try:
        if len(cmd.yaml.encode()) > MAX_CONFIG_BYTES:
            raise ConfigError(f"config: larger than {MAX_CONFIG_BYTES} bytes")
        data = config_file.strip_secrets(config_file.parse(cmd.yaml, "config"))
        config_file.settings(data)
    except ConfigError as exc:
        return CommandRejected(command_id=cmd.command_id, status=422, message=str(exc),
                               reason=RejectReason.INVALID_CONFIG), []
    version = (state.config.version if state.config else 0) + 1
    new = ClusterConfig(version=version, yaml=config_file.dump(data), writer=cmd.writer, when=now)
    return (CommandAccepted(command_id=cmd.command_id, message=f"config version {version}"),
            [ConfigChanged(config=new)])


def to_write(config: ClusterConfig | None, written: ClusterConfig | None) -> bool:
    """The state holds a config this node has not written yet (any version, or another one
    after two sessions merged). The accepting node's API wrote its file before asking, with
    the secrets its request carried; its master finds the same content and writes nothing."""
    return config is not None and config != written


def synced_file(config: ClusterConfig, current: dict[str, Any]) -> dict[str, Any]:
    """The file this node should have: the cluster's config plus this node's own secrets."""
    synced = config_file.strip_secrets(config_file.parse(config.yaml, "synced config"))
    return config_file.keep_secrets(synced, current)


class ConfigFile:
    """This node's `skulk.yaml` (the file it was started with), kept equal to the state's."""

    def __init__(self, path: str, home: Path) -> None:
        self.path = Path(path) if path else home / "skulk.yaml"
        self.written: ClusterConfig | None = None

    def sync(self, state: State) -> None:
        """Called after every change of the state: cheap unless the config changed."""
        config = state.config
        if not to_write(config, self.written):
            return
        assert config is not None
        self.written = config  # once per version, even if it fails: no retry storm in the log
        try:
            try:
                existing = config_file.read(self.path)
            except ConfigError as exc:  # unusable anyway: replaced, without secrets to keep
                log.warning("config sync: %s", exc)
                existing = None
            wanted = synced_file(config, existing or {})
            if wanted != existing:  # a missing file is written too, even as `{}`
                config_file.write(self.path, wanted)
                log.info("config sync: wrote %s (cluster config version %d from node %s)",
                         self.path, config.version, config.writer)
        except (ConfigError, OSError) as exc:
            log.error("config sync: cannot write %s (version %d): %s", self.path, config.version, exc)
