"""When a request outlives its instance (pure): whether a stream whose runner or node was lost
goes on elsewhere, what it sends, and when a request waits for a lost instance to come back.

The API node that holds the client keeps every token it has passed on (`TokenChunk.index`).
When the instance serving it is lost mid-answer (its runner crashed, its node died or froze),
the stream is routed again with the same parameters and those tokens as the answer's
continuation (`TaskParams.continuation`): the new runner prefills prompt and continuation,
replays the continuation through its detokenizer, channels, stop strings and grammar without
sending it, and goes on. The client sees one stream; the usage counts the prompt once and every
completion token once. A greedy answer is the one an undisturbed run gives; a sampled one goes
on plausibly, not bit for bit (the new runner's generator starts afresh).

Bounded: at most `api.resume.max_attempts` continuations per request, each waiting at most
`api.resume.wait_s` (with keep-alives) for an instance of the model to serve, such as the one the
leader places again for a lost node. Past that, the client gets the error it got before.
"""

from __future__ import annotations

from collections.abc import Mapping

from skulk.cluster.state import State, serving
from skulk.wire.commands import RejectReason
from skulk.wire.inference import Failed, FailReason

RESUMABLE = frozenset({FailReason.RUNNER_FAILED, FailReason.INSTANCE_LOST, FailReason.PREEMPTED})
"""Endings that say the instance was lost, or took the answer out to make room in its KV cache
(`preempted`: routed again, it waits in a runner's queue for room), not that the request was wrong."""
WAIT_FOR = frozenset({RejectReason.NO_INSTANCE, RejectReason.NOT_READY})
"""Routing refusals worth waiting out while the model's lost capacity comes back."""


def resumable(failed: Failed, attempts: int, max_attempts: int) -> bool:
    """Whether a stream that ended so may go on elsewhere (`attempts`: continuations so far)."""
    return failed.reason in RESUMABLE and attempts < max_attempts


def continuation(sent: Mapping[int, int]) -> tuple[int, ...] | None:
    """The answer's tokens so far, in order, from the chunks passed on (by their index); None
    when one is missing, or a chunk came without an index (a runner of an older version)."""
    if -1 in sent:
        return None
    tokens = tuple(sent[i] for i in range(1, len(sent) + 1) if i in sent)
    return tokens if len(tokens) == len(sent) else None


def recovering(state: State, model: str) -> bool:
    """Whether lost capacity of `model` is coming back: an instance of it waits to be placed
    again, or one placed in a lost one's stead is not serving yet."""
    for note in state.deleted.values():
        if note.instance is not None and not note.replaced_by and note.instance.model_id == model:
            return True
        placed = state.instances.get(note.replaced_by) if note.replaced_by else None
        if placed is not None and placed.model_id == model and not serving(state, placed):
            return True
    return False


def worth_waiting(state: State, model: str, refused: str) -> bool:
    """Whether a request refused by routing (`refused`) should wait for a change of this node's
    copy of the state and ask again: the model's lost capacity is coming back, or routing found
    no instance while this copy still lists one. The leader then removed it (a lost node) and
    the event saying so, with the re-creation it schedules, has not reached this node yet: a
    404 then would refuse a request the next event says to wait for."""
    if recovering(state, model):
        return True
    return refused == RejectReason.NO_INSTANCE and any(i.model_id == model for i in state.instances.values())
