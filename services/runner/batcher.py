"""Rank 0's batch loop without sockets: requests in, messages out, one `RankStep` per step.

`on_generate` admits (or refuses at once: busy, context) and answers `Started`; `plan` and
`apply` run one step: removals, then the waiting requests that fit join the batch, then one
engine step, whose tokens become each session's messages. The service sends what these
return; unit tests drive the same object with the fake engine.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from skulk.node import logctx
from skulk.node.trace_files import now_us
from skulk.services.base import PeerLost
from skulk.services.runner import admission, scheduler
from skulk.services.runner.engine import Engine, StepOutput
from skulk.services.runner.scheduler import Admission, Limits
from skulk.services.runner.sessions import Session
from skulk.services.runner.tracing import RankTraces
from skulk.wire.inference import (
    Done,
    Failed,
    FailReason,
    Generate,
    Progress,
    ProgressPhase,
    RankInsert,
    RankStep,
    Started,
)
from skulk.wire.message import Message

log = logging.getLogger("skulk.runner")

Out = tuple[list[bytes], Message]
"""A message for the client at this envelope."""


@dataclass
class Plan:
    step: RankStep
    joiners: list[Session]


class Batcher:
    def __init__(self, engine: Engine, limits: Limits,
                 draw_seed: Callable[[], int] = lambda: random.randrange(2 ** 31),
                 traces: RankTraces | None = None) -> None:
        self.engine, self.limits, self.draw_seed = engine, limits, draw_seed
        self.traces = traces
        self.last_prefilling = 0  # prompts still prefilling after the last step
        self.last_tokens = 0  # tokens the last step generated
        self.tokens_total = 0  # tokens generated since start (the runner's tok/s comes from it)
        self.step_cpu_s = 0.0  # CPU (all threads) and wall seconds inside engine steps since start
        self.step_wall_s = 0.0
        self.waiting: deque[Session] = deque()
        self.running: dict[int, Session] = {}  # by engine uid
        self.by_request: dict[str, Session] = {}
        self.removes: list[int] = []  # uids to take out of the batch at the next step
        self.failed_joiners: list[Out] = []  # answers for requests whose insert failed this step
        self.seq = 0

    # ---- load ------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        return len(self.running) + len(self.waiting)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.removes or self.engine.active())

    # ---- requests --------------------------------------------------------------------------
    def on_generate(self, envelope: list[bytes], msg: Generate, now: float) -> list[Out]:
        if why := admission.ids_error(msg):  # refused before any log line carries the ids
            return [(envelope, Failed(request_id=msg.request_id[:admission.MAX_ID_CHARS], error=why,
                                      retryable=False, reason=FailReason.BAD_REQUEST))]
        with logctx.bind(command_id=msg.request_id, task_id=msg.task_id):
            outs = self._admit(envelope, msg, now)
            for _, answer in outs:
                if isinstance(answer, Started):
                    log.info("request %s admitted: %d prompt tokens, %d queued", msg.request_id,
                             answer.prompt_tokens, answer.queued)
                elif isinstance(answer, Failed):
                    log.info("request %s refused (%s): %s", msg.request_id, answer.reason, answer.error)
            return outs

    def _admit(self, envelope: list[bytes], msg: Generate, now: float) -> list[Out]:
        def refuse(reason: FailReason, error: str, retryable: bool = False) -> list[Out]:
            return [(envelope, Failed(request_id=msg.request_id, error=error, retryable=retryable,
                                      reason=reason))]

        if msg.request_id in self.by_request:
            return []  # a duplicate frame of a request already here
        params = msg.params
        limit = scheduler.context_limit(msg.context_limit, self.engine.model_context)
        size = sum(len(m.content.encode()) for m in params.messages) + len(params.prompt.encode())
        if scheduler.exceeds_by_size(size, self.engine.max_token_bytes,
                                     1 if msg.default_max_tokens else params.max_tokens, limit):
            return refuse(FailReason.CONTEXT_LENGTH_EXCEEDED,
                          scheduler.context_message(size // max(1, self.engine.max_token_bytes),
                                                    params.max_tokens, limit, at_least=True))
        if why := admission.request_error(params):  # before it could fail its co-joiners' insert
            return refuse(FailReason.BAD_REQUEST, why)
        where = scheduler.admit(self.pending, self.limits)
        if where is Admission.BUSY:
            return refuse(FailReason.BUSY, f"runner busy: {self.limits.max_batch} requests in its batch "
                          f"and {self.limits.queue_max} waiting; retry shortly", retryable=True)
        try:
            prompt = self.engine.encode(params)
        except Exception as exc:  # noqa: BLE001 - a template error is this request's, not the runner's
            return refuse(FailReason.BAD_REQUEST, f"the prompt could not be built: {type(exc).__name__}: {exc}")
        if not prompt:
            return refuse(FailReason.BAD_REQUEST, "the prompt is empty after the chat template")
        if msg.default_max_tokens and limit > 0:  # the default output budget: what fits after the prompt
            params = replace(params, max_tokens=max(1, min(params.max_tokens, limit - len(prompt))))
        vocab = int(getattr(self.engine, "vocab_size", 0) or 0)
        if vocab and any(not 0 <= t < vocab for t in params.continuation):  # an id past the embedding crashes it
            return refuse(FailReason.BAD_REQUEST, f"a continuation token is not in this model's vocabulary "
                                                  f"(0..{vocab - 1})")
        if len(params.continuation) >= params.max_tokens:
            return refuse(FailReason.BAD_REQUEST, f"a continuation of {len(params.continuation)} tokens leaves "
                                                  f"nothing of max_tokens {params.max_tokens}")
        if scheduler.exceeds(len(prompt), params.max_tokens, limit):
            return refuse(FailReason.CONTEXT_LENGTH_EXCEEDED,
                          scheduler.context_message(len(prompt), params.max_tokens, limit))
        seed = params.seed if params.seed is not None else self.draw_seed()
        session = Session(msg.request_id, envelope, params, prompt, seed, admitted_at=now,
                          fmt=self.engine.output_format(), task_id=msg.task_id, trace=msg.trace)
        if msg.trace and self.traces is not None:
            self.traces.admitted(msg.request_id, msg.task_id)
        self.waiting.append(session)
        self.by_request[msg.request_id] = session
        queued = max(0, self.pending - self.limits.max_batch) if where is Admission.QUEUE else 0
        return [(envelope, Started(request_id=msg.request_id, prompt_tokens=len(prompt), queued=queued))]

    def cancel(self, request_id: str) -> list[Out]:
        """Take a request out wherever it is; its batch row goes at the next step. Its stream
        gets a `cancelled` ending (the canceller may not be its reader: `POST /v1/cancel`)."""
        session = self.by_request.pop(request_id, None)
        if session is None:
            return []
        session.done = True
        if session.uid >= 0:
            self.running.pop(session.uid, None)
            self.removes.append(session.uid)
        else:
            self.waiting.remove(session)
        return [(session.envelope, Failed(request_id=request_id, error="Command cancelled.",
                                          retryable=False, reason=FailReason.CANCELLED))]

    def keep_alive(self) -> list[Out]:
        """`Progress(queued)` for every waiting request (the API's sign the runner lives)."""
        return [(s.envelope, Progress(request_id=s.request_id, phase=ProgressPhase.QUEUED)) for s in self.waiting]

    # ---- one step --------------------------------------------------------------------------
    def plan(self) -> Plan | None:
        """This step's removals and joiners (the `RankStep` before prefix lookups), or None
        when there is nothing to run."""
        if not self.has_work():
            return None
        joiners = [self.waiting.popleft() for _ in range(self._joining())]
        first = self.engine.next_uid()
        inserts = tuple(RankInsert(uid=first + i, prompt=(*s.prompt, *s.params.continuation),
                                   max_tokens=s.params.max_tokens - len(s.params.continuation),
                                   continued=len(s.params.continuation),
                                   temperature=0.0 if s.params.temperature is None else s.params.temperature,
                                   top_p=1.0 if s.params.top_p is None else s.params.top_p,
                                   top_k=s.params.top_k or 0, min_p=s.params.min_p or 0.0,
                                   seed=s.seed, cached=0, grammar=s.params.grammar,
                                   trace_task=s.task_id if s.trace else "")
                        for i, s in enumerate(joiners))
        self.seq += 1
        step = RankStep(seq=self.seq, cache_entries=self.engine.cache_entries(),
                        removes=tuple(self.removes), inserts=inserts)
        self.removes = []
        return Plan(step, joiners)

    def _joining(self) -> int:
        """How many waiting requests join now: room in the batch, and in the engine's KV cache
        where it has a fixed size (the others wait for rows to end)."""
        n = scheduler.joining(len(self.running), len(self.waiting), self.limits)
        capacity = self.engine.kv_capacity
        if n == 0 or capacity <= 0:
            return n
        running = [scheduler.kv_claim(len(s.prompt) + s.completion_tokens, s.params.max_tokens - s.completion_tokens,
                                      capacity) for s in self.running.values()]
        waiting = [scheduler.kv_claim(len(s.prompt) + len(s.params.continuation),
                                      s.params.max_tokens - len(s.params.continuation), capacity)
                   for s in list(self.waiting)[:n]]
        return scheduler.kv_joining(capacity, running, waiting)

    def admit_plan(self, plan: Plan, now: float) -> RankStep:
        """Apply the plan's removals and inserts to the engine; the `RankStep` for the other
        ranks, with the prefix-cache hits they must find too."""
        self.engine.remove(plan.step.removes)
        try:
            cached = self.engine.insert(plan.step.inserts)
        except Exception as exc:  # noqa: BLE001 - nothing was inserted: the joiners fail, nobody else
            log.exception("requests could not join the batch")
            self.failed_joiners = [(s.envelope, Failed(request_id=s.request_id, retryable=False,
                                                       error=f"{type(exc).__name__}: {exc}",
                                                       reason=FailReason.ENGINE_ERROR)) for s in plan.joiners]
            for session in plan.joiners:
                session.done = True
                self.by_request.pop(session.request_id, None)
            return replace(plan.step, inserts=())
        for session, ins, hit in zip(plan.joiners, plan.step.inserts, cached):
            session.on_inserted(ins.uid, hit, self.engine.detokenizer(), now)
            self.running[ins.uid] = session
            if session.trace and self.traces is not None:
                self.traces.joined(session.request_id, ins.uid, hit)
        return replace(plan.step, inserts=tuple(replace(i, cached=c) for i, c in zip(plan.step.inserts, cached)))

    def run_step(self, now_fn: Callable[[], float]) -> list[Out]:
        """One engine step; its tokens become the sessions' messages. An engine error fails the
        whole batch (it cannot be pinned on one row); an error in one session's text or
        logprobs fails that session only."""
        outs, self.failed_joiners = self.failed_joiners, []
        traces = self.traces or None  # falsy while no traced request is here: no clock reads
        start_us = now_us() if traces else 0
        cpu0, wall0 = time.process_time(), time.perf_counter()
        try:
            out = self.engine.step()
        except Exception as exc:  # noqa: BLE001
            log.exception("batch step failed; failing its %d requests", len(self.running))
            return outs + self._fail_all(f"{type(exc).__name__}: {exc}")
        self.step_cpu_s += time.process_time() - cpu0  # what the model costs; the rest of the loop is ours
        self.step_wall_s += time.perf_counter() - wall0
        now = now_fn()
        self.last_prefilling = sum(p.done < p.total for p in out.prompts)
        self.last_tokens = len(out.tokens)
        self.tokens_total += len(out.tokens)
        if traces:
            traces.step(self.seq, start_us, now_us(), {p.uid for p in out.prompts}, {t.uid for t in out.tokens},
                        len(self.running))
        outs.extend(self._preempted(out.preempted))
        for p in out.prompts:
            if (s := self.running.get(p.uid)) is not None and p.done < p.total:
                outs.append((s.envelope, Progress(request_id=s.request_id, phase=ProgressPhase.PREFILL,
                                                  processed=p.done, total=p.total)))
        for tok in out.tokens:
            session = self.running.get(tok.uid)
            if session is None:
                continue  # removed meanwhile (cancelled, stop string): its last token is moot
            with logctx.bind(command_id=session.request_id, task_id=session.task_id):
                text_us = now_us() if traces and session.trace else 0
                messages: Sequence[Message]
                try:
                    messages = session.on_token(tok, self.engine, now)
                    if text_us and traces is not None:  # text_us is read only with traces
                        traces.text(tok.uid, text_us, now_us())
                except Exception as exc:  # noqa: BLE001
                    log.exception("request %s failed", session.request_id)
                    session.done = True
                    messages = [Failed(request_id=session.request_id, error=f"{type(exc).__name__}: {exc}",
                                       retryable=False, reason=FailReason.ENGINE_ERROR)]
                for m in messages:
                    if isinstance(m, Done):
                        log.info("request %s done (%s): %d prompt + %d tokens", session.request_id,
                                 m.finish_reason, m.prompt_tokens, m.completion_tokens)
            outs.extend((session.envelope, m) for m in messages)
            if session.done:
                self._finished(session, in_engine=tok.finish is None)
        return outs

    def _finished(self, session: Session, in_engine: bool) -> None:
        self.running.pop(session.uid, None)
        self.by_request.pop(session.request_id, None)
        if in_engine:  # a stop string or an error: the engine still runs the row
            self.removes.append(session.uid)

    def _preempted(self, uids: list[int]) -> list[Out]:
        """Rows the engine took out for room in its KV cache: their requests end `preempted`, which
        the API resumes (the answer so far as its continuation), so the client's stream goes on once
        there is room again."""
        outs: list[Out] = []
        for uid in uids:
            session = self.running.pop(uid, None)
            if session is None:
                continue
            session.done = True
            self.by_request.pop(session.request_id, None)
            log.warning("request %s preempted after %d tokens: the KV cache (%d tokens) is full",
                        session.request_id, session.completion_tokens, self.engine.kv_capacity)
            outs.append((session.envelope, Failed(
                request_id=session.request_id, retryable=True, reason=FailReason.PREEMPTED,
                error=f"the runner's KV cache ({self.engine.kv_capacity} tokens) filled up; this answer was taken "
                      "out to make room")))
        return outs

    def _fail_all(self, error: str) -> list[Out]:
        outs: list[Out] = []
        for session in list(self.running.values()):
            session.done = True
            outs.append((session.envelope, Failed(request_id=session.request_id, error=error,
                                                  retryable=False, reason=FailReason.ENGINE_ERROR)))
            self._finished(session, in_engine=True)
        return outs

    def client_gone(self, request_id: str) -> None:
        if self.cancel(request_id):
            with logctx.bind(command_id=request_id):
                log.info("client of %s is gone; removed from the batch", request_id)


def follow(engine: Engine, step: RankStep, expected_seq: int) -> StepOutput:
    """A follower rank applies rank 0's step exactly as rank 0 did; any disagreement is fatal
    (the runner exits, its instance is deleted and every request of it ends with an error)."""
    if step.seq != expected_seq:
        raise OutOfStep(f"rank step {step.seq} arrived, {expected_seq} expected")
    engine.trim_cache(step.cache_entries)
    engine.remove(step.removes)
    cached = engine.insert(step.inserts)
    if cached != [i.cached for i in step.inserts]:
        raise OutOfStep(f"prefix-cache hits {cached} differ from rank 0's {[i.cached for i in step.inserts]}")
    return engine.step()


class OutOfStep(PeerLost):
    """This rank's batch no longer matches rank 0's."""
