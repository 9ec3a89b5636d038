"""The generation path end to end inside one API worker, with a fake master client and a fake
runner link (`links/`): the real app, route table, client shape, `Generation`, resume and
bookkeeping, nothing else. What each link promises is tested with real sockets in the
integration suite; here, what the path makes of it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import falcon.testing
import pytest

from skulk.cluster.state import State
from skulk.node.role_args import ApiArgs, ChildArgs
from skulk.services.api.generate.generation import Generation
from skulk.services.api.generate.timing import KeepAlive, StreamTiming
from skulk.services.api.http.app import build_app
from skulk.services.api.http.declare import Deps
from skulk.services.api.http.routes import ROUTES
from skulk.wire.commands import CommandRejected, RejectReason, Reply, Routed, TaskFinished, TextGeneration
from skulk.wire.inference import Done, Failed, FailReason, Started, TokenChunk
from skulk.wire.message import Message
from tests.unit.builders import CARD, placed

MODEL = CARD.model_id
ENDPOINT = "tcp://127.0.0.1:1"


class FakeReplica:
    """The state replica: one instance of MODEL, its runner ready at ENDPOINT."""

    def __init__(self, state: State) -> None:
        self.state, self.departed, self.started, self.members = state, frozenset(), 0.0, 1

    def get(self, timeout: float = 5.0) -> State:
        return self.state

    def wait_change(self, after_idx: int, timeout: float) -> None:
        return None


class FakeMaster:
    """Routes every generation to the one runner (or refuses with `refusals` first); records
    what it was told."""

    def __init__(self, instance_id: str, runner_id: str, refusals: list[RejectReason] | None = None) -> None:
        self.instance_id, self.runner_id = instance_id, runner_id
        self.refusals = list(refusals or [])
        self.asked: list[Message] = []
        self.told: list[Message] = []

    def command(self, cmd: Message, timeout: float = 5.0) -> Reply:
        self.asked.append(cmd)
        assert isinstance(cmd, TextGeneration)
        if self.refusals:
            reason = self.refusals.pop(0)
            return CommandRejected(command_id=cmd.command_id, status=503, message=str(reason), reason=reason)
        return Routed(command_id=cmd.command_id, task_id=f"task-{len(self.asked)}", instance_id=self.instance_id,
                      runner_id=self.runner_id, endpoint=ENDPOINT)

    def tell(self, cmd: Message) -> None:
        self.told.append(cmd)


def tokens(request_id: str, text: str, first_index: int = 1) -> list[Message]:
    return [TokenChunk(request_id=request_id, seq=i, text=ch, token=ord(ch), index=first_index + i)
            for i, ch in enumerate(text)]


def done(request_id: str, completion: int, reason: str = "stop") -> Done:
    return Done(request_id=request_id, seq=99, finish_reason=reason, prompt_tokens=3, completion_tokens=completion,
                prompt_tps=1.0, generation_tps=1.0, peak_memory_bytes=0)


class FakeRunners:
    """Plays one scripted answer per stream opened: `scripts[k](request_id, params)` -> messages."""

    timing = StreamTiming()

    def __init__(self, *scripts: Any) -> None:
        self.scripts = list(scripts)
        self.opened: list[Any] = []
        self.cancelled: list[str] = []

    def stream(self, endpoint: str, request_id: str, task_id: str, instance_id: str, runner_id: str,
               params: Any, context_limit: int = 0, default_max_tokens: bool = False,
               trace: bool = False) -> Iterator[Message | KeepAlive]:
        self.opened.append(params)
        yield from self.scripts.pop(0)(request_id, params)

    def cancel(self, endpoint: str, request_id: str) -> None:
        self.cancelled.append(request_id)


def client(tmp_path: Path, master: FakeMaster, runners: FakeRunners, replica: FakeReplica,
           max_output_tokens: int = 4096) -> falcon.testing.TestClient:
    api = ApiArgs(port=0, node_id="n1", keepalive=10.0, stall_timeout=120.0, max_output_tokens=max_output_tokens)
    generation = Generation(master, runners, replica, "n1",  # type: ignore[arg-type]
                            max_output_tokens=api.max_output_tokens)
    routes = tuple(r for r in ROUTES if r.path in ("/v1/chat/completions", "/v1/completions", "/api/chat"))
    deps = Deps(replica=replica, master=master, runners=runners, generation=generation,  # type: ignore[arg-type]
                child=ChildArgs(child_id="api", title="api", home=tmp_path, run_dir=tmp_path), api=api, version="t")
    return falcon.testing.TestClient(build_app(deps, routes))


@pytest.fixture
def cluster() -> tuple[FakeReplica, str, str]:
    state, iid, rid = placed()
    return FakeReplica(state), iid, rid


def chat(stream: bool, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": stream, **extra}


def sse_text(body: str) -> tuple[str, list[dict[str, Any]]]:
    frames = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")]
    text = "".join(f["choices"][0]["delta"].get("content") or "" for f in frames if f.get("choices"))
    return text, frames


def test_a_streamed_chat_is_the_runners_tokens_in_openai_frames_and_the_task_is_told_finished(tmp_path, cluster):
    replica, iid, rid = cluster
    master = FakeMaster(iid, rid)
    runners = FakeRunners(lambda r, _p: [Started(request_id=r, prompt_tokens=3), *tokens(r, "Hello"), done(r, 5)])
    got = client(tmp_path, master, runners, replica).simulate_post("/v1/chat/completions", json=chat(True))
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/event-stream")
    text, frames = sse_text(got.text)
    assert text == "Hello" and frames[-1]["usage"]["completion_tokens"] == 5
    assert got.text.rstrip().endswith("data: [DONE]")
    (finished,) = master.told
    assert isinstance(finished, TaskFinished) and not finished.failed


def test_a_whole_answer_and_a_default_budget_from_the_api_argument(tmp_path, cluster):
    replica, iid, rid = cluster
    runners = FakeRunners(lambda r, _p: [Started(request_id=r, prompt_tokens=3), *tokens(r, "Hi"), done(r, 2)])
    app = client(tmp_path, FakeMaster(iid, rid), runners, replica, max_output_tokens=7)
    got = app.simulate_post("/v1/chat/completions", json=chat(False))
    assert got.status_code == 200 and got.json["choices"][0]["message"]["content"] == "Hi"
    usage = got.json["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (3, 2, 5)
    assert runners.opened[0].max_tokens == 7  # no max_tokens: `api.max_output_tokens`


def test_a_runner_refusal_is_the_clients_status_and_a_leader_change_is_waited_out(tmp_path, cluster):
    replica, iid, rid = cluster
    master = FakeMaster(iid, rid, refusals=[RejectReason.SESSION_CHANGED])  # routed again, then served
    runners = FakeRunners(lambda r, _p: [Failed(request_id=r, error="busy", reason=FailReason.BUSY)])
    got = client(tmp_path, master, runners, replica).simulate_post("/v1/chat/completions", json=chat(False))
    assert len(master.asked) == 2 and got.status_code == 503
    assert got.json["error"]["message"] == "busy"


def test_a_runner_lost_mid_answer_is_resumed_on_the_next_one_as_one_stream(tmp_path, cluster):
    replica, iid, rid = cluster
    master = FakeMaster(iid, rid)
    lost = Failed(request_id="", error="runner lost", reason=FailReason.RUNNER_FAILED)
    runners = FakeRunners(
        lambda r, _p: [Started(request_id=r, prompt_tokens=3), *tokens(r, "Hel"), lost],
        lambda r, p: [Started(request_id=r, prompt_tokens=3 + len(p.continuation)),
                      *tokens(r, "lo", first_index=4), done(r, 5)])
    got = client(tmp_path, master, runners, replica).simulate_post("/v1/chat/completions", json=chat(True))
    text, frames = sse_text(got.text)
    assert text == "Hello" and "error" not in got.text
    assert runners.opened[1].continuation == tuple(map(ord, "Hel"))  # the tokens already sent
    assert frames[-1]["usage"]["completion_tokens"] == 5  # counted once
    assert [type(m).__name__ for m in master.told] == ["TaskFinished", "TaskFinished"]  # the lost one failed
    assert master.told[0].failed and not master.told[1].failed


def test_a_request_lost_before_admission_is_routed_again_away_from_the_nodes_this_node_saw_leave(tmp_path, cluster):
    replica, iid, rid = cluster
    master = FakeMaster(iid, rid)

    def lost_with_its_node(request_id: str, _params: Any) -> list[Message]:
        replica.departed = frozenset({"n9"})  # this node's gossip saw the runner's node leave; the leader not yet
        return [Failed(request_id=request_id, error="lost", reason=FailReason.INSTANCE_LOST)]

    runners = FakeRunners(lost_with_its_node,
                          lambda r, _p: [Started(request_id=r, prompt_tokens=3), *tokens(r, "Hi"), done(r, 2)])
    got = client(tmp_path, master, runners, replica).simulate_post("/v1/chat/completions", json=chat(False))
    assert got.status_code == 200 and got.json["choices"][0]["message"]["content"] == "Hi"
    assert [cmd.avoid_nodes for cmd in master.asked] == [(), ("n9",)]  # the leader is told where not to route
