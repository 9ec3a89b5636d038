"""One admitted request as the adapters see it: a `Stream` of typed events.

A `Stream` owns the request's bookkeeping: however it ends (done, failed, cancelled, or the
client went away and the framework closed the generator) the runner is told to drop an
abandoned request and the master is told how the task ended. A lost instance's answer goes on
elsewhere inside the same stream (`resume.py`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeAlias, cast

from skulk.cluster.state import TaskParams
from skulk.node import logctx
from skulk.services.api.generate import resume
from skulk.services.api.generate.errors import GenerationError
from skulk.services.api.generate.metering import StreamMeter
from skulk.services.api.generate.request_trace import RequestTrace
from skulk.services.api.generate.timing import KeepAlive, StreamTiming
from skulk.wire.commands import Routed
from skulk.wire.inference import Done, Failed, FailReason, Progress, Started, TokenChunk

if TYPE_CHECKING:
    from skulk.services.api.generate.generation import Generation

log = logging.getLogger("skulk.api.generation")

Event: TypeAlias = KeepAlive | Progress | TokenChunk | Done | Failed
"""What a stream yields after admission: keep-alives, prefill progress, tokens, then exactly
one `Done` or `Failed`."""


@dataclass
class Stream:
    """One admitted request. Iterate it once; `prompt_tokens` is known from admission."""

    generation: Generation
    routed: Routed
    params: TaskParams
    prompt_tokens: int
    created: int
    _events: Iterator[Event]
    _outcome: Failed | Done | None = None
    _closed: bool = False
    meter: StreamMeter | None = None  # the request's metrics (`metering.py`), set by `open`
    trace: RequestTrace | None = None  # the API's spans when the task is traced (`request_trace.py`)
    default_budget: bool = False  # the client gave no max_tokens (a continuation asks the same)
    sent: dict[int, int] = field(default_factory=dict)  # the answer's tokens passed on, by index
    resumes: int = 0  # continuations on another instance so far (`resume.py`)

    @property
    def command_id(self) -> str:
        return self.routed.command_id

    def __iter__(self) -> Iterator[Event]:
        try:
            while True:
                with bound(self.routed):  # around each step, never across a yield
                    event = next(self._events, None)
                if event is None:
                    return
                if not isinstance(event, TokenChunk) and self.generation.events is not None:
                    self.generation.events.flush()  # a pause (keep-alive, progress, a resume): its chunks on record now
                if isinstance(event, Failed) and resume.resumable(event, self.resumes, self._timing.resume_attempts):
                    if (yield from self._resume(event)):
                        continue
                if isinstance(event, (Done, Failed)):
                    self._outcome = event
                if self.meter is not None:
                    self.meter.saw(event, time.monotonic())
                if isinstance(event, TokenChunk):
                    if event.index:
                        self.sent[event.index] = event.token
                    else:  # a runner of an older version: what was sent cannot be continued exactly
                        self.sent[-1] = event.token
                    if self.trace is not None:
                        self.trace.chunk()
                    if self.generation.events is not None:
                        self.generation.events.chunk(self.routed, self.params.model, event)
                yield event
                if self._outcome is not None:
                    return
        finally:
            self.close()

    @property
    def _timing(self) -> StreamTiming:
        return self.generation.runners.timing

    def _resume(self, failed: Failed) -> Generator[Event, None, bool]:
        """Go on with the answer on another serving instance (True), keep-alives meanwhile, or
        give up (False: the client gets `failed`). The lost task is recorded as failed."""
        tokens = resume.continuation(self.sent)
        if tokens is None or len(tokens) >= self.params.max_tokens:
            return False
        self.resumes += 1
        gen = self.generation
        with bound(self.routed):
            log.warning("request %s: %s after %d tokens; going on elsewhere (attempt %d of %d)",
                        self.command_id, failed.reason, len(tokens), self.resumes, self._timing.resume_attempts)
            gen.finished(self.routed, failed)
        params = replace(self.params, continuation=tokens)
        deadline = time.monotonic() + self._timing.resume_wait_s
        while True:
            opened = gen.reopen(params, self.default_budget)
            if isinstance(opened, tuple):
                self.routed, self._events = opened
                with bound(self.routed):
                    log.info("request %s: resumed on %s of instance %s", self.routed.command_id,
                             self.routed.runner_id, self.routed.instance_id)
                return True
            if not opened or time.monotonic() >= deadline:
                log.warning("request %s: no instance to go on with (%s)", self.command_id,
                            f"waited {self._timing.resume_wait_s:.0f}s" if opened else "refused")
                return False
            yield KeepAlive()
            state = gen.replica.get(timeout=0)
            gen.replica.wait_change(state.last_event_applied_idx if state else -1,
                                    min(1.0, max(0.0, deadline - time.monotonic())))

    def close(self) -> None:
        """The bookkeeping, once: drop an abandoned request at its runner, tell the master."""
        if self._closed:
            return
        self._closed = True
        outcome = self._outcome
        with bound(self.routed):
            if outcome is None:  # the client went away (or the server is stopping)
                log.info("request %s: client gone, cancelling", self.command_id)
                self.generation.runners.cancel(self.routed.endpoint, self.command_id)
            else:
                log.info("request %s: %s", self.command_id, _describe(outcome))
            self.generation.finished(self.routed, outcome)
        if self.meter is not None:
            self.meter.closed(outcome)
        if self.generation.events is not None:
            self.generation.events.ended(self.routed, self.params.model, outcome, self.prompt_tokens)
        if self.trace is not None:
            self.trace.closed("cancelled" if outcome is None else
                              outcome.reason if isinstance(outcome, Failed) else outcome.finish_reason)


def bound(routed: Routed) -> AbstractContextManager[None]:
    """The request's ids on every log line of this block (`node/logctx.py`)."""
    return logctx.bind(command_id=routed.command_id, task_id=routed.task_id)


def _describe(outcome: Done | Failed) -> str:
    if isinstance(outcome, Failed):
        return f"failed ({outcome.reason}): {outcome.error}"
    return f"done ({outcome.finish_reason}), {outcome.prompt_tokens} prompt + {outcome.completion_tokens} tokens"


def without_started(events: Iterator[object]) -> Iterator[Event]:
    for event in events:
        if not isinstance(event, Started):
            yield cast(Event, event)  # a runner's reply stream is Started, then `Event`s (`RunnerLink.stream`)


def collect(stream: Stream) -> tuple[list[TokenChunk], Done | Failed]:
    """A non-streaming response's material: every token chunk and the outcome."""
    chunks: list[TokenChunk] = []
    for event in stream:
        if isinstance(event, TokenChunk):
            chunks.append(event)
        elif isinstance(event, (Done, Failed)):
            return chunks, event
    raise GenerationError(500, FailReason.ENGINE_ERROR, "the stream ended without an outcome")
