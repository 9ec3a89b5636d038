"""A resumed answer (pure parts): what the API sends on, when it goes on or waits, and the new
runner's session replaying the tokens already sent so that its text continues theirs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from skulk.cluster.state import DeletionNote, RunnerStatus, RunnerStatusUpdated, TaskParams
from skulk.services.api.generate.resume import continuation, recovering, resumable, worth_waiting
from skulk.services.runner.engine import TokenOut
from skulk.services.runner.sessions import Session
from skulk.wire.commands import RejectReason
from skulk.wire.inference import Done, Failed, FailReason, TokenChunk
from tests.unit.builders import CARD, PARAMS, placed, run


class CharDetok:
    """One character per token id (ord)."""

    def __init__(self) -> None:
        self.last_segment = ""

    def add_token(self, token: int) -> None:
        self.last_segment = chr(token)

    def finalize(self) -> None:
        self.last_segment = ""


class NoEngine:
    def peak_memory(self) -> int:
        return 0


def session(stop: tuple[str, ...] = (), already: str = "", max_tokens: int = 20) -> Session:
    params = replace(PARAMS, stop=stop, max_tokens=max_tokens, continuation=tuple(map(ord, already)))
    s = Session("r", [], params, prompt=[1, 2, 3], seed=0, admitted_at=0.0)
    s.on_inserted(0, 0, CharDetok(), 0.0)
    return s


def feed(s: Session, text: str, finish_last: str | None = None) -> list[Any]:
    out: list[Any] = []
    for k, ch in enumerate(text):
        finish = finish_last if k == len(text) - 1 else None
        out += s.on_token(TokenOut(uid=0, token=ord(ch), logprobs=None, finish=finish), NoEngine(), 1.0)  # type: ignore[arg-type]
    return out


def text_of(messages: list[Any]) -> str:
    return "".join(m.text for m in messages if isinstance(m, TokenChunk))


def test_the_replayed_tokens_are_not_sent_and_what_follows_continues_them():
    undisturbed = session(stop=("END",))
    whole = feed(undisturbed, "abc EN dEND")
    resumed = session(stop=("END",), already="abc E")  # the lost runner held "E" back (a stop's start)
    rest = feed(resumed, "N dEND")
    assert text_of(feed(session(stop=("END",)), "abc E")) + text_of(rest) == text_of(whole) == "abc EN d"
    done = rest[-1]
    assert isinstance(done, Done) and done.finish_reason == "stop" and done.stop_string == "END"
    assert done.completion_tokens == len("abc EN dEND") == whole[-1].completion_tokens
    assert done.prompt_tokens == 3  # the prompt once, the continuation counted as completion
    assert [m.index for m in rest if isinstance(m, TokenChunk)] == list(range(6, 11))


def test_the_api_goes_on_only_after_a_lost_instance_or_a_preemption_and_within_its_attempts():
    lost = Failed(request_id="r", error="x", reason=FailReason.INSTANCE_LOST)
    crashed = Failed(request_id="r", error="x", reason=FailReason.RUNNER_FAILED)
    preempted = Failed(request_id="r", error="x", reason=FailReason.PREEMPTED)  # a full KV cache made room
    assert resumable(lost, 0, 2) and resumable(crashed, 1, 2) and not resumable(crashed, 2, 2)
    assert resumable(preempted, 0, 2) and not resumable(preempted, 2, 2)
    for reason in (FailReason.CANCELLED, FailReason.ENGINE_ERROR, FailReason.BAD_REQUEST, FailReason.STALLED):
        assert not resumable(Failed(request_id="r", error="x", reason=reason), 0, 2)
    assert not resumable(lost, 0, 0)  # api.resume.max_attempts: 0
    assert continuation({1: 10, 2: 11, 3: 12}) == (10, 11, 12)
    assert continuation({}) == ()
    assert continuation({1: 10, 3: 12}) is None  # a token missing: nothing to go on from
    assert continuation({-1: 10}) is None  # a chunk without an index (an older runner)


def test_a_request_waits_while_the_models_lost_capacity_comes_back():
    state, iid, rid = placed()
    assert not recovering(state, CARD.model_id)
    inst = state.instances[iid]
    pending = replace(state, instances={}, runners={}, deleted={iid: DeletionNote(
        model_id=CARD.model_id, reason="lost", when=1.0, cause="node_lost", recreate_at=3.0, instance=inst)})
    assert recovering(pending, CARD.model_id) and not recovering(pending, "other/model")
    made = replace(state, deleted={"old": DeletionNote(model_id=CARD.model_id, reason="lost", when=1.0,
                                                       cause="node_lost", replaced_by=iid)})
    loading = run(made, [RunnerStatusUpdated(runner_id=rid, status=RunnerStatus(kind="RunnerLoading"))])
    assert recovering(loading, CARD.model_id) and not recovering(made, CARD.model_id)  # ready: served


def test_a_request_refused_for_no_instance_waits_while_this_nodes_state_still_lists_one():
    """The leader removed a lost node's instance (and scheduled its re-creation) before this
    node's copy of the state heard so: routing says no instance, the copy still lists it. The
    request waits for the event instead of answering 404; a model with no instance at all, or a
    NOT_READY refusal of a live one, is answered at once as before."""
    state, iid, _rid = placed()
    assert worth_waiting(state, CARD.model_id, RejectReason.NO_INSTANCE)  # the copy lags the leader
    assert not worth_waiting(state, "other/model", RejectReason.NO_INSTANCE)
    assert not worth_waiting(state, CARD.model_id, RejectReason.NOT_READY)  # first load: not lost capacity
    pending = replace(state, instances={}, runners={}, deleted={iid: DeletionNote(
        model_id=CARD.model_id, reason="lost", when=1.0, cause="node_lost", recreate_at=3.0,
        instance=state.instances[iid])})
    assert worth_waiting(pending, CARD.model_id, RejectReason.NOT_READY)
    gone = replace(state, instances={}, runners={})
    assert not worth_waiting(gone, CARD.model_id, RejectReason.NO_INSTANCE)


def test_a_continuation_is_part_of_the_request_on_the_wire():
    from skulk.wire.codec import decode, encode

    params = TaskParams(model="m", messages=PARAMS.messages, max_tokens=9, continuation=(5, 6))
    assert decode(encode(params)) == params
