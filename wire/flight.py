"""A runner's flight recorder entries (seed 002's timeline), published on the node's bus.

Each runner keeps a bounded ring of these and publishes every entry as it records it, so the
node's API holds the latest entries of a runner that has since frozen (SIGSTOP, a wedged
collective) or died: the timeline shows where each rank stopped, which a runner that no longer
answers could not tell. Entries are diagnostics, never decisions, so the lossy bus is fine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from skulk.wire.message import Message

Phase = Literal["created", "idle", "connect_group", "load_model", "warmup", "task_submission",
                "task_agreement", "prompt_build", "vision_preprocess", "kv_cache_lookup", "prefill_barrier",
                "prefill_pipeline", "prefill_stream", "decode_barrier", "decode_wait_first_token",
                "decode_stream", "parser", "cancel_requested", "cancel_observed", "completion", "error",
                "shutdown_cleanup"]
"""Seed 002's phases, exactly (the timeline's schema)."""

PHASES: tuple[str, ...] = Phase.__args__  # type: ignore[attr-defined]


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
    phase: str  # one of PHASES
    event: str  # "enter" (the phase began), "progress" (still in it), or a named happening
    detail: str = ""
    attrs: dict[str, str | int | float | bool] = field(default_factory=dict)
    task_id: str = ""
    command_id: str = ""
    phase_since: float = 0.0  # wall clock when the current phase began
    last_progress_at: float = 0.0  # wall clock of the last decode/prefill step that moved
    mlx_memory: MlxMemory | None = None
