"""The replicated cluster state and the indexed events that change it (event sourcing).

The leader master turns commands into events, stamps each with an index, applies them with
`wire.reducer.apply` and publishes them; every replica (followers, API workers) applies the
same events in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, Literal, TypeAlias

from skulk.cluster.catalog import NodeCatalogUpdated
from skulk.wire.accelerator import Accelerator
from skulk.wire.config_sync import ClusterConfig, ConfigChanged
from skulk.wire.message import Message
from skulk.wire.models import ModelCard
from skulk.wire.staging import DownloadProgress, NodeDownloadUpdated, StagingPurged
from skulk.wire.tracing import TracingSet


class RunnerKind(StrEnum):
    """A runner's status, the tag of `RunnerStatus` (and of its entry in `/state`)."""

    IDLE = "RunnerIdle"
    CONNECTING = "RunnerConnecting"
    CONNECTED = "RunnerConnected"
    LOADING = "RunnerLoading"
    LOADED = "RunnerLoaded"
    WARMING_UP = "RunnerWarmingUp"
    READY = "RunnerReady"
    RUNNING = "RunnerRunning"
    SHUTTING_DOWN = "RunnerShuttingDown"
    FAILED = "RunnerFailed"


SERVING_KINDS = frozenset({RunnerKind.READY, RunnerKind.RUNNING})
"""The kinds a runner takes requests in: routing waits for every rank to be in one."""


class TaskStatus(StrEnum):
    """A task's `status` (`taskStatus` in `/state`)."""

    PENDING = "Pending"
    RUNNING = "Running"
    COMPLETE = "Complete"
    TIMED_OUT = "TimedOut"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


OPEN_STATUSES = frozenset({TaskStatus.PENDING, TaskStatus.RUNNING})
"""A task in one of these still holds its instance (a drain waits for it; routing counts it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardMeta(Message):
    TYPE: ClassVar[str] = "state.shard"
    kind: str  # "Pipeline" | "Tensor"
    device_rank: int
    world_size: int
    start_layer: int
    end_layer: int  # exclusive
    n_layers: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Instance(Message):
    TYPE: ClassVar[str] = "state.instance"
    instance_id: str
    instance_meta: str  # "MlxRing"
    card: ModelCard
    runner_to_shard: dict[str, ShardMeta]
    node_to_runner: dict[str, str]
    context_token_limit: int
    ring_hosts: tuple[str, ...] = ()  # "ip:port" per rank: the mx.distributed ring hostfile
    engine: str = "mlx"  # the EngineKind every rank runs (`cluster/engines.py` chose it)

    @property
    def model_id(self) -> str:
        return self.card.model_id


@dataclass(frozen=True, slots=True, kw_only=True)
class RunnerStatus(Message):
    """Upstream's runner status union, flattened: `kind` is the tag, a `RunnerKind`.

    `endpoint` (the runner's ROUTER) and `node_id` are ours and are not shown in `/state`.
    """

    TYPE: ClassVar[str] = "state.runner_status"
    kind: str  # a RunnerKind (a plain str on the wire: an unknown kind from a newer node still decodes)
    layers_loaded: int = 0
    total_layers: int = 0
    error_message: str = ""
    endpoint: str = ""
    node_id: str = ""
    exit_code: int | None = None  # RunnerFailed: the process's exit code where it ended (node/exitcodes.py)
    orderly: bool = False  # RunnerFailed: its own node stopped it on purpose (plan, shutdown, restart)
    engine_path: str = ""  # from ready on: the device and dtype path it serves with
    speculation: str = ""  # from ready on: its speculative decoding ("prompt_lookup x4"), or why none


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall(Message):
    """A function call the model made (parsed by mlx-lm's tool parser on rank 0), or one an
    assistant message carries back in; `arguments` is JSON text, as OpenAI sends it."""

    TYPE: ClassVar[str] = "state.tool_call"
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatMessage(Message):
    TYPE: ClassVar[str] = "state.chat_message"
    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant's calls, given back in a multi-turn chat
    tool_call_id: str = ""  # role "tool": the call this result answers
    name: str = ""  # role "tool": the function's name


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskParams(Message):
    """A validated chat request (upstream's TextGenerationTaskParams)."""

    TYPE: ClassVar[str] = "state.task_params"
    model: str
    messages: tuple[ChatMessage, ...]
    max_tokens: int
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    prompt: str = ""  # a raw prompt (legacy completions, Ollama `raw`): tokenized as is, no chat template
    grammar: str = ""  # an llguidance grammar (from `response_format`) the output must follow
    tools: str = ""  # the request's `tools` as JSON text, for the chat template ("" for none)
    enable_thinking: bool | None = None  # passed to the chat template where it takes it
    reasoning_effort: str = ""  # passed to the chat template where it takes it
    # The answer's tokens an instance lost mid-answer had already sent (`api.resume`): the new
    # runner prefills them after the prompt and replays them through its output, unsent, and
    # the answer goes on from there; they count in `max_tokens` and in the usage's completion.
    continuation: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Task(Message):
    TYPE: ClassVar[str] = "state.task"
    task_id: str
    command_id: str
    instance_id: str
    status: str  # a TaskStatus
    owner_node: str
    params: TaskParams
    error_type: str = ""
    error_message: str = ""
    trace: bool = False  # stamped by the leader from `State.tracing_enabled` when it created the task


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInfo(Message):
    """What a node says about itself (identity, memory); display name is never dialled."""

    TYPE: ClassVar[str] = "state.node_info"
    node_id: str
    friendly_name: str
    skulk_version: str
    ram_total: int
    ram_available: int
    when: float  # wall clock (time.time()) of the reading
    addresses: tuple[str, ...] = ()  # reachable IPs (transport); friendly_name is display only
    disk_total: int = 0
    disk_available: int = 0
    api_port: int = 0  # where this node's HTTP API listens on `addresses` (peer fan-out reads it)
    event_log_mode: str = ""  # "writing" | "counting" (the disk is full: events counted, not written)
    event_log_reason: str = ""  # why it is counting only
    accelerator: Accelerator | None = None  # what its runners compute on (`wire/accelerator.py`)
    engines: tuple[str, ...] = ()  # the EngineKinds its runners can use (`wire/engines.py`); (): MLX only


DELETED_BY_OPERATOR = "deleted by operator"
Cause = Literal["", "operator", "runner_failed", "engine_refused", "given_up", "node_lost"]
"""Why an instance was deleted, for machines (the reason is for people): an operator's delete
ends its streams as cancelled; a failed runner's as the runner's shutdown; anything else as
lost. `runner_failed` instances are re-created, `engine_refused` ones too, at once, on another
engine; `given_up` ones are not."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletionNote(Message):
    """Why an instance went away (shown in /state as `deletedInstances`; the last few kept)."""

    TYPE: ClassVar[str] = "state.deletion_note"
    model_id: str
    reason: str
    when: float
    cause: Cause = ""
    # A re-creation is replicated state, not the leader's memory, so a leader elected in the
    # back-off still makes it: `instance` is kept while it is pending, `recreate_at` (wall
    # clock) says when it is due, `replaced_by` names the instance that re-created it.
    recreate_at: float = 0.0
    instance: Instance | None = None
    replaced_by: str = ""
    refused_engine: str = ""  # the engine that could not run the checkpoint: re-created without it
    # A rank that lost its peer (`exitcodes.PEER_LOST`) reported first: the instance's other
    # runners, whose own failure, reported later, is the cause the reason should name.
    awaiting_cause: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class State(Message):
    TYPE: ClassVar[str] = "state.state"
    session: str = ""
    master_node_id: str = ""
    last_event_applied_idx: int = -1
    instances: dict[str, Instance] = field(default_factory=dict)
    runners: dict[str, RunnerStatus] = field(default_factory=dict)
    tasks: dict[str, Task] = field(default_factory=dict)
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    deleted: dict[str, DeletionNote] = field(default_factory=dict)
    restarting: dict[str, float] = field(default_factory=dict)  # node id -> kept until (wall clock)
    config: ClusterConfig | None = None  # the cluster-wide skulk.yaml, once `PUT /config` set one
    downloads: dict[str, dict[str, DownloadProgress]] = field(default_factory=dict)  # node -> model -> copy
    purge: StagingPurged | None = None  # the operator's last purge (each worker acts on it once)
    catalog: dict[str, NodeCatalogUpdated] = field(default_factory=dict)  # `catalog_key` -> the models there
    tracing_enabled: bool = False  # new tasks are traced (wire/tracing.py)


# ---- events -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceCreated(Message):
    TYPE: ClassVar[str] = "event.instance_created"
    instance: Instance
    replaces: str = ""  # the failed instance this one re-creates (its deletion note says so)


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceDeleted(Message):
    TYPE: ClassVar[str] = "event.instance_deleted"
    instance_id: str
    reason: str = ""
    when: float = 0.0
    cause: Cause = ""
    recreate_at: float = 0.0  # wall clock; non-zero: to be re-created then, by whoever leads
    refused_engine: str = ""  # the re-creation runs on another engine of the card than this one
    awaiting_cause: tuple[str, ...] = ()  # the note's `awaiting_cause`


@dataclass(frozen=True, slots=True, kw_only=True)
class RecreationAbandoned(Message):
    """A pending re-creation that placement still refused once the failure window had passed."""

    TYPE: ClassVar[str] = "event.recreation_abandoned"
    instance_id: str
    reason: str
    by_operator: bool = False  # the operator deleted it while it waited: its note says `operator`


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletionCauseFound(Message):
    """A runner the note awaited failed after its peer rank's report had deleted the instance:
    the note's reason names this failure, the cause, from now on."""

    TYPE: ClassVar[str] = "event.deletion_cause_found"
    instance_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunnerStatusUpdated(Message):
    TYPE: ClassVar[str] = "event.runner_status_updated"
    runner_id: str
    status: RunnerStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskCreated(Message):
    TYPE: ClassVar[str] = "event.task_created"
    task: Task


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStatusUpdated(Message):
    TYPE: ClassVar[str] = "event.task_status_updated"
    task_id: str
    status: str  # a TaskStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskFailed(Message):
    TYPE: ClassVar[str] = "event.task_failed"
    task_id: str
    error_type: str
    error_message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskDeleted(Message):
    TYPE: ClassVar[str] = "event.task_deleted"
    task_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeTimedOut(Message):
    """A node silent past its liveness timeout: it and everything placed on it are removed."""

    TYPE: ClassVar[str] = "event.node_timed_out"
    node_id: str
    when: float = 0.0  # wall clock, for the deletion notes of its instances
    replace_after_s: float = 0.0  # its instances are placed again on the others this long after; 0: never


RESTART_GRACE_S = 30.0
"""How long the leader keeps a node that announced an in-place restart (and its instances)
while gossip does not hear it: it is back in a few seconds, its instances are served again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRestarting(Message):
    """A node is restarting in place (`POST /admin/restart`, SIGHUP): not lost until `until`;
    `until` 0: it is back (said by its new master process once it has the state)."""

    TYPE: ClassVar[str] = "event.node_restarting"
    node_id: str
    until: float  # wall clock


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeGatheredInfo(Message):
    TYPE: ClassVar[str] = "event.node_gathered_info"
    info: NodeInfo


Event: TypeAlias = (InstanceCreated | InstanceDeleted | RecreationAbandoned | DeletionCauseFound
                    | RunnerStatusUpdated | TaskCreated
                    | TaskStatusUpdated | TaskFailed | TaskDeleted | NodeGatheredInfo | NodeTimedOut | NodeRestarting
                    | ConfigChanged | NodeDownloadUpdated | StagingPurged | NodeCatalogUpdated | TracingSet)
EVENT_TYPES = (InstanceCreated, InstanceDeleted, RecreationAbandoned, DeletionCauseFound, RunnerStatusUpdated,
               TaskCreated,
               TaskStatusUpdated, TaskFailed, TaskDeleted, NodeGatheredInfo, NodeTimedOut, NodeRestarting,
               ConfigChanged, NodeDownloadUpdated, StagingPurged, NodeCatalogUpdated, TracingSet)


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexedEvent(Message):
    """One event as the leader stamped it; replicas apply strictly in `idx` order."""

    TYPE: ClassVar[str] = "state.indexed_event"
    idx: int
    session: str
    event: Event


@dataclass(frozen=True, slots=True, kw_only=True)
class StateHead(Message):
    """The leader's latest index, published every second so a replica that lost the tail of
    the (lossy) bus notices and re-syncs from a snapshot."""

    TYPE: ClassVar[str] = "state.head"
    idx: int
    session: str


def serving(state: State, inst: Instance) -> bool:
    """Every runner of the instance reports Ready or Running (and has an endpoint), and none of
    its nodes is restarting in place (marked before its runners stop, cleared by its new image)."""
    return all(rid in state.runners and state.runners[rid].kind in SERVING_KINDS
               for rid in inst.runner_to_shard) and not any(n in state.restarting for n in inst.node_to_runner)
