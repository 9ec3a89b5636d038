"""The runner's flight recorder: where this rank is, kept and told as it happens.

`FlightRecorder` keeps a bounded ring of `FlightEntry`s: one at each phase change, and inside a
long phase one `progress` entry at most every `progress_every_s` (the step that moved is noted
in `last_progress_at` either way). Every entry is returned to the caller, who publishes it on
the node's bus, so the node's API holds a rank's last entries even after the rank froze.

`StallWatch` is the one thing the loop cannot do itself: while a step is stuck (a rank waiting
in a collective for a peer that froze or died, a first-use GPU kernel compile, a big prefill),
the loop is blocked inside MLX, so a small thread notices the step has not returned and records
`decode_barrier` / `prefill_barrier` entries (a single rank: `long_step` in its stream phase) on
its own socket. That is the timeline's deadlock signature: the waiting rank's entries keep
coming, the stuck rank's stop. It also tells the supervisor the step and its age, which then
judges the rank by `runner.step_deadline_s` instead of by the beats its loop cannot send.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skulk.wire.flight import FlightEntry, MlxMemory, Phase

RING_SIZE = 512
PROGRESS_EVERY_S = 1.0
STALL_AFTER_S = 2.0
"""A step that has not returned after this long is reported as waiting (a decode step of the
models we serve takes tens of milliseconds; a long prefill chunk well under a second)."""
STALL_NOTE_EVERY_S = 2.0


@dataclass(frozen=True)
class Ident:
    runner_id: str
    instance_id: str
    model_id: str
    node_id: str
    rank: int
    world_size: int


def mlx_memory() -> MlxMemory | None:
    """MLX's allocator figures now; None where MLX is absent (the fake engine's tests)."""
    try:
        import mlx.core as mx
    except ImportError:
        return None

    def read(name: str) -> int | None:
        fn = getattr(mx, name, None)
        try:
            return int(fn()) if fn is not None else None
        except Exception:  # noqa: BLE001 - a runtime without the figure
            return None

    return MlxMemory(at=time.time(), active=read("get_active_memory"), cache=read("get_cache_memory"),
                     peak=read("get_peak_memory"), source="mlx.core")


class FlightRecorder:
    def __init__(self, ident: Ident, memory: Callable[[], MlxMemory | None] = mlx_memory,
                 capacity: int = RING_SIZE, progress_every_s: float = PROGRESS_EVERY_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.ident, self.memory, self.clock = ident, memory, clock
        self.progress_every_s = progress_every_s
        self.ring: deque[FlightEntry] = deque(maxlen=capacity)
        self.lock = threading.Lock()
        self.seq = 0
        self.phase: str = Phase.CREATED
        self.phase_since = self.clock()
        self.last_progress_at = 0.0
        self.last_entry_at = 0.0
        self.task_id = ""
        self.command_id = ""

    def enter(self, phase: Phase, detail: str = "", task_id: str | None = None, command_id: str | None = None,
              attrs: dict[str, Any] | None = None, event: str = "enter") -> FlightEntry | None:
        """A phase change (None when already in `phase` for the same task: nothing new)."""
        with self.lock:
            if phase == self.phase and (task_id is None or task_id == self.task_id):
                return None
            self.phase, self.phase_since = phase, self.clock()
            if task_id is not None:
                self.task_id, self.command_id = task_id, command_id or ""
            return self._record(event, detail, attrs, self.task_id, self.command_id)

    def note(self, event: str, detail: str = "", task_id: str = "", command_id: str = "",
             attrs: dict[str, Any] | None = None, phase: Phase | None = None) -> FlightEntry:
        """A named happening (a cancel, a completion, an error), in `phase` when given (which
        then becomes the current phase)."""
        with self.lock:
            if phase is not None and phase != self.phase:
                self.phase, self.phase_since = phase, self.clock()
            return self._record(event, detail, attrs, task_id or self.task_id, command_id or self.command_id)

    def progress(self, attrs: dict[str, Any] | None = None) -> FlightEntry | None:
        """A step moved; an entry only when the last one is `progress_every_s` old."""
        with self.lock:
            now = self.clock()
            self.last_progress_at = now
            if now - self.last_entry_at < self.progress_every_s:
                return None
            return self._record("progress", "", attrs, self.task_id, self.command_id)

    def entries(self) -> list[FlightEntry]:
        with self.lock:
            return list(self.ring)

    def _record(self, event: str, detail: str, attrs: dict[str, Any] | None, task_id: str,
                command_id: str) -> FlightEntry:
        now = self.clock()
        i = self.ident
        entry = FlightEntry(runner_id=i.runner_id, instance_id=i.instance_id, model_id=i.model_id,
                            node_id=i.node_id, rank=i.rank, world_size=i.world_size, pid=os.getpid(),
                            seq=self.seq, at=now, phase=self.phase, event=event, detail=detail,
                            attrs=dict(attrs or {}), task_id=task_id, command_id=command_id,
                            phase_since=self.phase_since, last_progress_at=self.last_progress_at,
                            mlx_memory=self.memory())
        self.seq += 1
        self.last_entry_at = now
        self.ring.append(entry)
        return entry


class StallWatch:
    """Notices a step that does not return: records where this rank is (see above) and, through
    `beat`, tells the supervisor which step its loop is inside and for how long, so a long step
    (a first-use GPU compile, a big prefill) is judged by the step deadline, not by missed beats."""

    def __init__(self, recorder: FlightRecorder, publish: Callable[[FlightEntry], None],
                 stall_after_s: float = STALL_AFTER_S, every_s: float = STALL_NOTE_EVERY_S,
                 beat: Callable[[str, float], None] | None = None, sharded: bool = True) -> None:
        self.recorder, self.publish, self.beat, self.sharded = recorder, publish, beat, sharded
        self.stall_after_s, self.every_s = stall_after_s, every_s
        self._step: tuple[float, int, bool] | None = None  # (monotonic start, seq, prefill): one read
        self._noted = 0.0
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-watch", daemon=True)
        self._thread.start()

    def begin(self, seq: int, prefill: bool) -> None:
        self._noted = 0.0
        self._step = (time.monotonic(), seq, prefill)

    def end(self) -> None:
        self._step = None

    def stop(self) -> None:
        self._wake.set()
        self._thread.join(2.0)

    def _run(self) -> None:
        while not self._wake.wait(0.5):
            step = self._step  # one read: a step that begins meanwhile is seen whole next time
            if step is None:
                continue
            began, seq, prefill = step
            now = time.monotonic()
            waited = now - began
            if waited < self.stall_after_s:
                continue
            kind = "prefill" if prefill else "decode"
            if self.beat is not None:
                self.beat(f"{kind} step {seq}", waited)
            if now - self._noted < self.every_s:
                continue
            self._noted = now
            if self.sharded:
                entry = self.recorder.note("waiting_on_ranks", f"step {seq} has not returned for {waited:.1f} s",
                                           attrs={"step": seq, "waitedS": round(waited, 1)},
                                           phase=Phase.PREFILL_BARRIER if prefill else Phase.DECODE_BARRIER)
            else:
                entry = self.recorder.note("long_step", f"{kind} step {seq} has run for {waited:.1f} s",
                                           attrs={"step": seq, "waitedS": round(waited, 1)},
                                           phase=Phase.PREFILL_STREAM if prefill else Phase.DECODE_STREAM)
            self.publish(entry)
