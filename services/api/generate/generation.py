"""The one generation path of the API: check, route, admit, and hand back a `Stream`.

Every wire shape (OpenAI chat and legacy completions, OpenAI Responses, Anthropic Messages,
Ollama) is an adapter: it parses its body into `TaskParams`, calls `Generation.open`, and
renders the `Event`s of the returned `Stream` (`stream.py`) in its own framing. What can go
wrong is typed (`errors.py`): `GenerationError` before the stream (a status and a reason),
`Failed.reason` inside it. `Generation` also reopens a lost answer elsewhere for its stream and
tells the master how each task ended.
"""

from __future__ import annotations

import copy
import itertools
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from skulk.cluster.replica import StateReplica
from skulk.cluster.state import TaskParams
from skulk.node.metrics import INTERNAL_ERROR
from skulk.node.trace_files import now_us
from skulk.services.api.generate import resume
from skulk.services.api.generate.errors import GenerationError, context_checked, fail_status
from skulk.services.api.generate.metering import ApiShape, StreamMeter
from skulk.services.api.generate.request_trace import RequestTrace
from skulk.services.api.generate.stream import Event, Stream, bound, without_started
from skulk.services.api.generate.timing import KeepAlive
from skulk.services.api.links.event_log import EventRecorder
from skulk.services.api.links.master_client import THROUGH_FAILOVER, MasterClient, MasterUnavailable
from skulk.services.api.links.runner_link import RunnerLink
from skulk.wire.commands import (
    NO_INSTANCE,
    CommandRejected,
    RejectReason,
    Routed,
    TaskCancelled,
    TaskFinished,
    TextGeneration,
)
from skulk.wire.inference import Done, Failed, FailReason, Started

log = logging.getLogger("skulk.api.generation")


class Generation:
    def __init__(self, master: MasterClient, runners: RunnerLink, replica: StateReplica, node_id: str,
                 api: ApiShape = ApiShape.OTHER, max_output_tokens: int = 4096) -> None:
        self.master = master
        self.runners = runners
        self.replica = replica
        self.node_id = node_id
        self.home: Path | None = None  # where traced requests' spans go (set by the app)
        self.events: EventRecorder | None = None  # the event log's API records (set by the app)
        self.api = api
        self.max_output_tokens = max_output_tokens

    @property
    def node_name(self) -> str:
        """This node's name as the cluster knows it now (gossip may give it its derived name
        after the start): what its trace parts say."""
        state = self.replica.get(timeout=0)
        info = state.nodes.get(self.node_id) if state else None
        return info.friendly_name if info else ""

    def shaped(self, api: ApiShape) -> Generation:
        """This generation path for one client shape (its requests' `api` metrics label)."""
        shaped = copy.copy(self)
        shaped.api = api
        return shaped

    def context_limit(self, model: str) -> int:
        """The largest usable context of the model's instances (404 when none exists)."""
        state = self.replica.get(timeout=5.0)
        if state is None:
            raise GenerationError(503, RejectReason.NO_LEADER, "cluster state is not available yet "
                                  "(the master is starting); retry shortly")
        limits = [i.context_token_limit for i in state.instances.values() if i.model_id == model]
        if not limits:
            raise GenerationError(404, RejectReason.NO_INSTANCE, NO_INSTANCE.format(model=model))
        return max(limits)

    def open(self, params: TaskParams) -> Stream:
        """Check the model and the output budget, route through the master once, and wait
        for the runner to admit the request: a refusal (busy, context too long) raises here, so
        it is the response's status, streaming or not. Metered from here (`metering.py`)."""
        meter = StreamMeter(self.api, params.model, time.monotonic())
        try:
            stream = self._open(params)
        except GenerationError as exc:
            meter.refused(exc.reason)
            raise
        except Exception:
            meter.refused(INTERNAL_ERROR)
            raise
        stream.meter = meter
        return stream

    def _open(self, params: TaskParams) -> Stream:
        """Routed and admitted; while the model's lost capacity comes back (`resume.recovering`:
        no instance serves yet, or the one routed to was lost before admitting the request),
        asked again, for at most `api.resume.wait_s`."""
        deadline = time.monotonic() + self.runners.timing.resume_wait_s
        attempts = 0
        while True:
            try:
                return self._open_once(params)
            except GenerationError as exc:
                if exc.reason in resume.RESUMABLE and attempts < self.runners.timing.resume_attempts \
                        and time.monotonic() < deadline:
                    attempts += 1  # lost before it admitted the request: nothing was sent yet
                    log.warning("request for %s: %s before admission; routing it again", params.model, exc.reason)
                    continue
                if exc.reason in resume.WAIT_FOR and self._recovering(params.model, exc.reason, deadline):
                    continue
                raise

    def _open_once(self, params: TaskParams) -> Stream:
        opened_us = now_us()
        default_budget = params.max_tokens == 0  # the runner fits it to the prompt it tokenizes
        params = context_checked(params, self.context_limit(params.model), self.max_output_tokens)
        try:  # asked again while the leader changes (a rolling restart)
            routed = THROUGH_FAILOVER.ask(self.master, lambda _attempt: self._command(params))
        except MasterUnavailable as exc:
            raise GenerationError(503, RejectReason.NO_LEADER, str(exc)) from None
        if isinstance(routed, CommandRejected):
            raise GenerationError(routed.status, routed.reason, routed.message)
        assert isinstance(routed, Routed)
        with bound(routed):
            log.info("request %s: routed to %s of instance %s", routed.command_id, routed.runner_id,
                     routed.instance_id)
            if self.events is not None:
                self.events.routed(routed, params.model)
            trace = RequestTrace(self.home, self.node_id, self.node_name, routed, params.model, opened_us) \
                if routed.trace and self.home is not None else None
            stream = self._admitted(routed, params, default_budget, trace)
            stream.trace = trace
            return stream

    def _command(self, params: TaskParams) -> TextGeneration:
        return TextGeneration(command_id=uuid.uuid4().hex, owner_node=self.node_id, params=params,
                              avoid_nodes=tuple(sorted(self.replica.departed)))

    def _recovering(self, model: str, refused: str, deadline: float) -> bool:
        """Wait (a state change, at most a second) if the model's lost capacity is coming back,
        or this node's state has yet to hear that its instance is gone (`resume.worth_waiting`),
        and the deadline allows: True to ask again, False to answer now (`api.resume` off: never)."""
        state = self.replica.get(timeout=0)
        if not self.runners.timing.resume_attempts or state is None \
                or not resume.worth_waiting(state, model, refused) or time.monotonic() >= deadline:
            return False
        log.info("no instance of %s serves yet, one is coming back: waiting", model)
        self.replica.wait_change(state.last_event_applied_idx, min(1.0, deadline - time.monotonic()))
        return True

    def _admitted(self, routed: Routed, params: TaskParams, default_budget: bool,
                  trace: RequestTrace | None = None) -> Stream:
        """Wait for the runner's answer: the stream, or its refusal raised."""
        first, rest = self._first_answer(routed, params, default_budget)
        prompt_tokens = 0
        if isinstance(first, Failed):
            self.finished(routed, first)
            if self.events is not None:
                self.events.ended(routed, params.model, first, 0)
            if trace is not None:
                trace.closed(first.reason)
            raise GenerationError(fail_status(first.reason), first.reason, first.error)
        if isinstance(first, Started):
            prompt_tokens = first.prompt_tokens
            if trace is not None:
                trace.admitted(prompt_tokens)
        return Stream(self, routed, params, prompt_tokens, int(time.time()), without_started(rest),
                      default_budget=default_budget)

    def _first_answer(self, routed: Routed, params: TaskParams,
                      default_budget: bool) -> tuple[object, Iterator[object]]:
        """Send the request to its runner and wait for its first answer (admission or refusal):
        that answer, and the stream to go on with: the keep-alives before it (a runner busy
        with a long step answers between steps; the stream itself ends a silent one), then what
        follows (the first answer too when it is not `Started`)."""
        state = self.replica.get(timeout=0)
        inst = state.instances.get(routed.instance_id) if state else None
        events = self.runners.stream(routed.endpoint, routed.command_id, routed.task_id, routed.instance_id,
                                     routed.runner_id, params, inst.context_token_limit if inst else 0,
                                     default_budget, routed.trace)
        quiet: list[KeepAlive] = []
        first = next(events)
        while isinstance(first, KeepAlive):
            quiet.append(first)
            first = next(events)
        return first, itertools.chain(quiet, events) if isinstance(first, Started) \
            else itertools.chain(quiet, [first], events)

    def reopen(self, params: TaskParams, default_budget: bool) -> tuple[Routed, Iterator[Event]] | bool:
        """A continuation routed and admitted: its route and events; True when it may be
        worth waiting (no instance serves the model yet, the leader is changing, a runner
        refused it as busy or was lost too), False when it never will be."""
        try:
            routed = THROUGH_FAILOVER.ask(self.master, lambda _attempt: self._command(params))
        except MasterUnavailable:
            return True
        if isinstance(routed, CommandRejected):
            return routed.reason in resume.WAIT_FOR
        assert isinstance(routed, Routed)
        first, rest = self._first_answer(routed, params, default_budget)
        if isinstance(first, Failed):
            self.finished(routed, first)
            return first.reason in resume.RESUMABLE or first.reason == FailReason.BUSY
        return routed, without_started(rest)

    def finished(self, routed: Routed, outcome: Done | Failed | None) -> None:
        """Tell the master how the task ended (without waiting: the client has its answer)."""
        cancelled = outcome is None or (isinstance(outcome, Failed) and outcome.reason == FailReason.CANCELLED)
        if cancelled:
            cmd: TaskCancelled | TaskFinished = TaskCancelled(command_id=uuid.uuid4().hex,
                                                              cancelled_command_id=routed.command_id)
        else:
            failed = isinstance(outcome, Failed)
            cmd = TaskFinished(command_id=uuid.uuid4().hex, finished_command_id=routed.command_id,
                               failed=failed, error_message=outcome.error if isinstance(outcome, Failed) else "",
                               reason=outcome.reason if isinstance(outcome, Failed) else "")
        self.master.tell(cmd)
