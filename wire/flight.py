"""A runner's flight recorder entries (its timeline of phases), published on the node's bus.

Each runner keeps a bounded ring of these and publishes every entry as it records it, so the
node's API holds the latest entries of a runner that has since frozen (SIGSTOP, a wedged
collective) or died: the timeline shows where each rank stopped, which a runner that no longer
answers could not tell. Entries are diagnostics, never decisions, so the lossy bus is fine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

from skulk.wire.message import Message


class Phase(StrEnum):
    """Where a runner is: the timeline's phase names, kept exactly as upstream's diagnostics
    name them (docs/architecture.md, "Compatibility with upstream Skulk")."""

    CREATED = "created"
    IDLE = "idle"
    CONNECT_GROUP = "connect_group"
    LOAD_MODEL = "load_model"
    WARMUP = "warmup"
    TASK_SUBMISSION = "task_submission"
    TASK_AGREEMENT = "task_agreement"
    PROMPT_BUILD = "prompt_build"
    VISION_PREPROCESS = "vision_preprocess"
    KV_CACHE_LOOKUP = "kv_cache_lookup"
    PREFILL_BARRIER = "prefill_barrier"
    PREFILL_PIPELINE = "prefill_pipeline"
    PREFILL_STREAM = "prefill_stream"
    DECODE_BARRIER = "decode_barrier"
    DECODE_WAIT_FIRST_TOKEN = "decode_wait_first_token"
    DECODE_STREAM = "decode_stream"
    PARSER = "parser"
    CANCEL_REQUESTED = "cancel_requested"
    CANCEL_OBSERVED = "cancel_observed"
    COMPLETION = "completion"
    ERROR = "error"
    SHUTDOWN_CLEANUP = "shutdown_cleanup"


PHASES: tuple[Phase, ...] = tuple(Phase)


@dataclass(frozen=True, slots=True, kw_only=True)
class MlxMemory(Message):
    """MLX's allocator figures at one moment (bytes); None where the runtime lacks the figure."""

    TYPE: ClassVar[str] = "flight.mlx_memory"
    at: float  # wall clock
    active: int | None = None
    cache: int | None = None
    peak: int | None = None
    wired_limit: int | None = None
    source: str = "mlx"


@dataclass(frozen=True, slots=True, kw_only=True)
class FlightEntry(Message):
    """One entry of a runner's flight recorder: a phase change, or a bounded-rate progress note
    inside a long phase (`event` says which)."""

    TYPE: ClassVar[str] = "flight.entry"
    runner_id: str
    instance_id: str
    model_id: str
    node_id: str
    rank: int
    world_size: int
    pid: int
    seq: int  # per runner, from 0: a gap says entries were lost on the bus
    at: float  # wall clock
    phase: str  # a Phase (a plain str on the wire: a newer runner's phase still decodes)
    event: str  # "enter" (the phase began), "progress" (still in it), or a named happening
    detail: str = ""
    attrs: dict[str, str | int | float | bool] = field(default_factory=dict)
    task_id: str = ""
    command_id: str = ""
    phase_since: float = 0.0  # wall clock when the current phase began
    last_progress_at: float = 0.0  # wall clock of the last decode/prefill step that moved
    mlx_memory: MlxMemory | None = None
