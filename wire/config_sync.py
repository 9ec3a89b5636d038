"""The cluster-wide `skulk.yaml` (`PUT /config`): the API's command, the event the leader
indexes and the replicated value it leaves in `State.config`.

The config lives in the replicated state, not in a broadcast, so a node that joins later or a
leader elected after a failover has it too. The YAML text never carries secrets (`hf_token`,
API keys): every node keeps its own (`node/config_file.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from skulk.wire.message import Command, Message

MAX_CONFIG_BYTES = 64 * 1024
"""A config is a few hundred bytes; the cap keeps snapshots and cluster frames small."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterConfig(Message):
    """The last config accepted for the whole cluster (`State.config`)."""

    TYPE: ClassVar[str] = "state.cluster_config"
    version: int  # 1, 2, ... per accepted change; carried over by new leaders
    yaml: str  # the file's text, secrets stripped
    writer: str  # node id of the API that took the `PUT /config` (shown by GET /config, logged)
    when: float  # wall clock


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigChanged(Message):
    """Every master that applies it writes its node's `skulk.yaml` (keeping its secrets)."""

    TYPE: ClassVar[str] = "event.config_changed"
    config: ClusterConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class SetConfig(Command):
    """API -> its master (-> the leader): make this validated config the cluster's."""

    TYPE: ClassVar[str] = "command.set_config"
    yaml: str  # secrets stripped
    writer: str  # the API's node id
