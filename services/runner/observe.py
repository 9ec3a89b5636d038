"""What the runner tells about itself besides its answers: flight-recorder entries (`flight.py`),
the spans of traced requests (`tracing.py`) and its token rate, from the loop's own hooks.

The service calls these at the points it already passes (admission, each step, each message
sent, boot and stop), so there is one place that decides which phase a step means and which
message ends a request's trace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from skulk.node.trace_files import now_us
from skulk.services.runner.flight import FlightRecorder, Ident, StallWatch
from skulk.services.runner.tracing import RankTraces
from skulk.wire.flight import FlightEntry, Phase
from skulk.wire.inference import Done, Failed, FailReason, RankStep, Started
from skulk.wire.message import Message

RATE_WINDOW_S = 1.0
"""tok/s is measured over at least this long (reports on change come more often)."""


class Observer:
    def __init__(self, ident: Ident, traces: RankTraces, publish: Callable[[FlightEntry], None],
                 stall_publish: Callable[[FlightEntry], None] | None, sharded: bool,
                 step_beat: Callable[[str, float], None] | None = None) -> None:
        self.recorder = FlightRecorder(ident)
        self.traces = traces
        self.publish = publish
        self.sharded = sharded
        # Its own thread and sockets (`stall_publish`, `step_beat`): the loop may be inside MLX.
        self.stall = (StallWatch(self.recorder, stall_publish, beat=step_beat, sharded=sharded)
                      if stall_publish is not None else None)
        self.rate_mark = (time.monotonic(), 0)
        self.tok_s = 0.0
        self.emit(self.recorder.note("created", f"rank {ident.rank} of {ident.world_size}"))

    def emit(self, entry: FlightEntry | None) -> None:
        if entry is not None:
            self.publish(entry)

    def enter(self, phase: Phase, detail: str = "", **kw: Any) -> None:
        self.emit(self.recorder.enter(phase, detail, **kw))

    # ---- rank 0 ---------------------------------------------------------------------------------
    def answered(self, msg: Message, task_id: str = "") -> None:
        """A message the runner is about to send (admission, outcome) as flight entries."""
        if isinstance(msg, Started):
            self.emit(self.recorder.note("admitted", f"{msg.prompt_tokens} prompt tokens, {msg.queued} queued",
                                         task_id=task_id, command_id=msg.request_id, phase=Phase.TASK_SUBMISSION,
                                         attrs={"promptTokens": msg.prompt_tokens, "queued": msg.queued}))
        elif isinstance(msg, Done):
            self.emit(self.recorder.note("done", f"{msg.finish_reason}: {msg.completion_tokens} tokens",
                                         command_id=msg.request_id, phase=Phase.COMPLETION,
                                         attrs={"completionTokens": msg.completion_tokens,
                                                "finishReason": msg.finish_reason}))
        elif isinstance(msg, Failed):
            cancelled = msg.reason == FailReason.CANCELLED
            self.emit(self.recorder.note("cancelled" if cancelled else "failed", msg.error[:200],
                                         command_id=msg.request_id,
                                         phase=Phase.CANCEL_OBSERVED if cancelled else Phase.ERROR,
                                         attrs={"reason": str(msg.reason)}))

    def cancel_requested(self, request_id: str) -> None:
        self.emit(self.recorder.note("cancel", "", command_id=request_id, phase=Phase.CANCEL_REQUESTED))

    def sent(self, request_id: str, msg: Message, start_us: int, delivered: bool) -> None:
        """Spans of a traced request's message; its trace is written once its outcome went out
        (or its client went away)."""
        if not self.traces:
            return
        if request_id in self.traces.by_request:
            self.traces.sent(request_id, start_us, now_us(), type(msg).__name__)
            if isinstance(msg, (Done, Failed)) or not delivered:
                self.traces.ended_request(request_id)

    # ---- every rank -------------------------------------------------------------------------------
    def step_begins(self, seq: int, prefill: bool) -> None:
        if self.stall is not None:
            self.stall.begin(seq, prefill)

    def step_ended(self, prefilling: int, tokens: int, running: int, task_id: str = "", command_id: str = "") -> None:
        """After a step: the phase it means (prefill while a prompt is still going in, decode
        while tokens come, idle when the batch emptied) and a bounded-rate progress entry."""
        if self.stall is not None:
            self.stall.end()
        if prefilling:
            phase = Phase.PREFILL_PIPELINE if self.sharded else Phase.PREFILL_STREAM
        elif tokens:
            phase = Phase.DECODE_STREAM
        elif not running:
            phase = Phase.IDLE
        else:
            phase = Phase.DECODE_WAIT_FIRST_TOKEN
        self.emit(self.recorder.enter(phase, f"batch {running}", task_id=task_id or None,
                                      command_id=command_id or None))
        self.emit(self.recorder.progress({"batch": running, "tokens": tokens, "prefilling": prefilling}))

    def follower_step(self, step: RankStep) -> None:
        """A follower's view of rank 0's decision: which traced requests joined."""
        if step.inserts:
            self.emit(self.recorder.note("step_received", f"step {step.seq}: {len(step.inserts)} joining",
                                         phase=Phase.TASK_AGREEMENT, attrs={"step": step.seq}))
        for ins in step.inserts:
            if ins.trace_task:
                self.traces.joined_follower(ins.uid, ins.trace_task)

    def rate(self, tokens_total: int) -> float:
        """Tokens per second since the last mark at least `RATE_WINDOW_S` old."""
        now = time.monotonic()
        then, count = self.rate_mark
        if now - then >= RATE_WINDOW_S:
            self.tok_s = (tokens_total - count) / (now - then)
            self.rate_mark = (now, tokens_total)
        return self.tok_s

    def shutdown(self) -> None:
        if self.stall is not None:
            self.stall.stop()  # joined: its socket may be closed after this
        self.emit(self.recorder.note("stopping", "orderly stop", phase=Phase.SHUTDOWN_CLEANUP))
        self.traces.flush(2.0)  # spans of requests that ended just before the stop
