"""Embeddings, the pure parts: the request and response of `POST /v1/embeddings`, the model
checks, the card of an embedding model, routing and placement of one, the runner's queue (with a
fake model) and its pooling (mlx, in a subprocess)."""

from __future__ import annotations

import base64
import json
import math
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from skulk.cluster.placement import GIB, PlacementError, place
from skulk.cluster.state import ChatMessage, NodeGatheredInfo, RunnerStatus, RunnerStatusUpdated, TaskParams
from skulk.node.model_cards import card_from_dir
from skulk.services.api.dialects.embeddings import (
    MAX_INPUTS,
    EmbeddingRequest,
    check_model,
    encode,
    parse,
    response,
)
from skulk.services.api.http.errors import ApiError
from skulk.services.master.commands import handle
from skulk.services.runner.embed_engine import Embedder, Pooling, group_size, pooling_of, to_bytes
from skulk.wire.codec import decode
from skulk.wire.codec import encode as wire_encode
from skulk.wire.commands import CommandRejected, PlaceInstance, RejectReason, Routed, TextEmbedding, TextGeneration
from skulk.wire.inference import Cancel, Embed, Embeddings, Failed, FailReason, Generate
from skulk.wire.models import ModelCard, ModelTask
from tests.unit.builders import CARD, base, ids, node, run

EMBED = replace(CARD, model_id="skulk/demo-embed", hidden_size=128, tasks=(ModelTask.TEXT_EMBEDDING.value,))


# ---- the HTTP request and response --------------------------------------------------------------
def test_parse_accepts_a_string_or_a_list_with_defaults():
    assert parse({"model": "m", "input": "hi"}) == EmbeddingRequest(model="m", inputs=("hi",))
    got = parse({"model": "m", "input": ["a", "b"], "encoding_format": "base64", "dimensions": 8, "user": "u"})
    assert got == EmbeddingRequest(model="m", inputs=("a", "b"), encoding_format="base64", dimensions=8)
    assert parse({"model": "m", "input": "x", "encoding_format": None, "dimensions": None}).dimensions == 0


@pytest.mark.parametrize("body, words", [
    ([], "JSON object"),
    ({"input": "x"}, "model is required"),
    ({"model": "m"}, "input must be"),
    ({"model": "m", "input": []}, "input must be"),
    ({"model": "m", "input": ["a", 3]}, "input must be"),
    ({"model": "m", "input": [1, 2, 3]}, "token arrays"),
    ({"model": "m", "input": ["a", ""]}, "input[1] is empty"),
    ({"model": "m", "input": ["a"] * (MAX_INPUTS + 1)}, f"at most {MAX_INPUTS}"),
    ({"model": "m", "input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"model": "m", "input": "x", "dimensions": 0}, "dimensions"),
    ({"model": "m", "input": "x", "dimensions": True}, "dimensions"),
    ({"model": "m", "input": "x", "dimensions": "8"}, "dimensions"),
])
def test_parse_refuses_bad_bodies_with_a_400_naming_the_field(body, words):
    with pytest.raises(ApiError) as exc:
        parse(body)
    assert exc.value.status == 400 and words in exc.value.message


def test_base64_is_the_little_endian_float32_bytes_and_equals_float():
    vector = to_bytes([1.0, -0.5, 0.1])
    assert vector[:8] == b"\x00\x00\x80\x3f\x00\x00\x00\xbf"  # 1.0, -0.5 as OpenAI sends them
    as_b64 = encode(vector, "base64")
    assert isinstance(as_b64, str) and base64.b64decode(as_b64) == vector
    floats = encode(vector, "float")
    assert floats == list(struct.unpack("<3f", base64.b64decode(as_b64)))
    assert floats[:2] == [1.0, -0.5] and abs(floats[2] - 0.1) < 1e-7


def test_response_has_openai_shape_and_usage():
    body = response("m", [to_bytes([0.6, 0.8]), to_bytes([1.0, 0.0])], 7, "float")
    assert body["object"] == "list" and body["model"] == "m"
    assert [(d["object"], d["index"]) for d in body["data"]] == [("embedding", 0), ("embedding", 1)]
    assert body["data"][1]["embedding"] == [1.0, 0.0]
    assert body["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    assert isinstance(response("m", [to_bytes([1.0])], 1, "base64")["data"][0]["embedding"], str)


def test_check_model_decides_on_the_cards_tasks():
    req = EmbeddingRequest(model="skulk/demo-embed", inputs=("x",))
    check_model(req, [EMBED])
    with pytest.raises(ApiError) as exc:
        check_model(req, [])
    assert (exc.value.status, exc.value.message) == (404, "No instance found for model skulk/demo-embed")
    with pytest.raises(ApiError) as exc:
        check_model(replace(req, model="skulk/demo-tiny"), [CARD])
    assert (exc.value.status, exc.value.message) == (400, "Model skulk/demo-tiny is not an embedding model")
    with pytest.raises(ApiError) as exc:
        check_model(replace(req, dimensions=129), [EMBED])
    assert exc.value.status == 400 and "at most 128" in exc.value.message


# ---- the card ------------------------------------------------------------------------------------
def _model_dir(root: Path, name: str, embedding: bool) -> Path:
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 128}))
    (d / "model.safetensors").write_bytes(b"\0" * 16)
    if embedding:
        (d / "modules.json").write_text("[]")
        (d / "1_Pooling").mkdir()
        (d / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_lasttoken": True}))
    return d


def test_a_sentence_transformers_directory_is_an_embedding_model(tmp_path):
    emb = card_from_dir(_model_dir(tmp_path, "org--emb", embedding=True))
    text = card_from_dir(_model_dir(tmp_path, "org--text", embedding=False))
    assert emb.tasks == ("TextEmbedding",) and emb.is_embedding
    assert text.tasks == ("TextGeneration",) and not text.is_embedding
    assert pooling_of(tmp_path / "org--emb") is Pooling.LAST
    assert pooling_of(tmp_path / "org--text") is Pooling.MEAN


# ---- wire, routing, placement --------------------------------------------------------------------
def test_embed_messages_round_trip():
    for msg in (Embed(request_id="r", task_id="t", inputs=("a", "b"), dimensions=4),
                Embeddings(request_id="r", start=2, vectors=(to_bytes([1.0]),), prompt_tokens=3),
                TextEmbedding(command_id="c", owner_node="n", model="m")):
        assert decode(wire_encode(msg)) == msg


def _serving(card: ModelCard):
    state = base()
    out = handle(state, PlaceInstance(command_id="p-" + card.model_id, card=card), ids(), 0.0)
    state = run(state, out.events)
    inst = next(i for i in state.instances.values() if i.model_id == card.model_id)
    (rid,) = inst.runner_to_shard
    return run(state, [RunnerStatusUpdated(runner_id=rid, status=RunnerStatus(
        kind="RunnerReady", endpoint="tcp://127.0.0.1:9"))]), inst.instance_id


def test_master_routes_embeddings_to_embedding_models_only_without_a_task():
    state, iid = _serving(EMBED)
    state = run(state, handle(state, PlaceInstance(command_id="p2", card=CARD), ids(), 0.0).events)
    out = handle(state, TextEmbedding(command_id="e1", owner_node="n1", model=EMBED.model_id), ids(), 0.0)
    assert isinstance(out.reply, Routed) and out.reply.instance_id == iid and out.events == []
    wrong = handle(state, TextEmbedding(command_id="e2", owner_node="n1", model=CARD.model_id), ids(), 0.0).reply
    assert isinstance(wrong, CommandRejected) and (wrong.status, wrong.reason) == (400, RejectReason.WRONG_TASK)
    assert wrong.message == "Model skulk/demo-tiny is not an embedding model"
    none = handle(state, TextEmbedding(command_id="e3", owner_node="n1", model="x/y"), ids(), 0.0).reply
    assert isinstance(none, CommandRejected) and none.status == 404
    chat = TextGeneration(command_id="g", owner_node="n1", params=TaskParams(
        model=EMBED.model_id, messages=(ChatMessage(role="user", content="hi"),), max_tokens=4))
    refused = handle(state, chat, ids(), 0.0)
    assert isinstance(refused.reply, CommandRejected) and refused.reply.status == 400 and refused.events == []


def test_an_embedding_model_is_placed_on_one_node_only():
    state = run(base(), [NodeGatheredInfo(info=node("n2"))])
    inst = place(state, PlaceInstance(command_id="c", card=EMBED, sharding="Tensor"), ids())
    assert not isinstance(inst, PlacementError) and len(inst.runner_to_shard) == 1
    refused = place(state, PlaceInstance(command_id="c", card=EMBED, min_nodes=2), ids())
    assert isinstance(refused, PlacementError) and refused.status == 400 and "one node" in refused.message
    huge = replace(EMBED, storage_size_bytes=20 * GIB)  # fits two nodes together, never one
    assert isinstance(place(state, PlaceInstance(command_id="c", card=huge), ids()), PlacementError)


# ---- the runner's queue --------------------------------------------------------------------------
class FakeModel:
    model_context = 8
    width = 2

    def __init__(self) -> None:
        self.calls: list[int] = []

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def embed(self, prompts, dimensions):
        self.calls.append(len(prompts))
        if any(p == [ord("!")] for p in prompts):
            raise RuntimeError("boom")
        return [to_bytes([float(len(p)), 0.0][: dimensions or 2]) for p in prompts]


def _embed(request_id: str, *inputs: str, dimensions: int = 0) -> Embed:
    return Embed(request_id=request_id, task_id="t", inputs=inputs, dimensions=dimensions)


def test_group_size_keeps_padded_tokens_within_the_budget():
    assert group_size([10] * 100, max_inputs=64, budget=4096) == 64
    assert group_size([1000, 1000, 1000, 3000], max_inputs=64, budget=4096) == 3  # 4 x 3000 would not fit
    assert group_size([1000, 1000, 1000, 1000, 10], max_inputs=64, budget=4096) == 4
    assert group_size([3000, 3000], max_inputs=64, budget=4096) == 1
    assert group_size([9000], max_inputs=64, budget=4096) == 1  # one input always runs
    assert group_size([], max_inputs=64, budget=4096) == 0


def test_embedder_answers_each_group_in_order_then_the_next_request():
    e = Embedder(FakeModel(), "skulk/demo-embed", queue_max=2, max_inputs=2)
    assert e.answer([b"a"], _embed("r1", "ab", "abc", "a")) == []
    assert e.answer([b"b"], _embed("r2", "x", dimensions=1)) == []
    assert e.load == (1, 1)
    busy = e.answer([b"c"], _embed("r3", "x"))
    assert busy[0][1].reason == FailReason.BUSY and busy[0][1].retryable
    parts = [e.step(), e.step(), e.step()]
    assert e.step() is None and e.load == (0, 0)
    msgs = [out[0][1] for out in parts]
    assert [(m.request_id, m.start, len(m.vectors), m.prompt_tokens) for m in msgs] == [
        ("r1", 0, 2, 5), ("r1", 2, 1, 1), ("r2", 0, 1, 1)]
    assert [out[0][0] for out in parts] == [[b"a"], [b"a"], [b"b"]]
    assert len(msgs[2].vectors[0]) == 4  # dimensions=1: one float32


@pytest.mark.parametrize("msg, reason, words", [
    (_embed("r", "ok", "123456789"), FailReason.CONTEXT_LENGTH_EXCEEDED, "input 1 has 9 tokens"),
    (_embed("r"), FailReason.BAD_REQUEST, "no input"),
    (_embed("r", "x", dimensions=3), FailReason.BAD_REQUEST, "dimensions"),
    (Generate(request_id="r", task_id="t", params=TaskParams(model="m", messages=(), max_tokens=1)),
     FailReason.BAD_REQUEST, "is an embedding model"),
])
def test_embedder_refuses_at_once(msg, reason, words):
    e = Embedder(FakeModel(), "skulk/demo-embed", queue_max=4)
    ((envelope, failed),) = e.answer([b"x"], msg)
    assert isinstance(failed, Failed) and failed.reason == reason and words in failed.error
    assert e.step() is None


def test_embedder_cancel_and_engine_errors_fail_only_that_request():
    e = Embedder(FakeModel(), "skulk/demo-embed", queue_max=4)
    e.answer([b"a"], _embed("r1", "!"))
    e.answer([b"b"], _embed("r2", "x"))
    e.answer([b"c"], _embed("r3", "y"))
    ((_, cancelled),) = e.answer([b"b"], Cancel(request_id="r2"))
    assert cancelled.reason == FailReason.CANCELLED
    ((_, failed),) = e.step()
    assert failed.request_id == "r1" and failed.reason == FailReason.ENGINE_ERROR and "boom" in failed.error
    ((_, ok),) = e.step()
    assert isinstance(ok, Embeddings) and ok.request_id == "r3"


# ---- pooling (mlx, in a subprocess) --------------------------------------------------------------
def test_pooling_ignores_padding_and_normalises():
    run_ = subprocess.run([sys.executable, "-m", "tests.unit.embed_pool_check"], capture_output=True,
                          text=True, timeout=120)
    assert run_.returncode == 0, run_.stderr
    got = json.loads(run_.stdout)

    def unit(*v: float) -> list[float]:
        n = math.sqrt(sum(x * x for x in v))
        return [x / n for x in v]

    def close(a, b):
        return all(abs(x - y) < 1e-6 for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))

    assert close(got["mean"], [unit(2.0, 4.0), unit(0.0, -2.0)])  # (3,0),(0,4),(3,8) -> (2,4)
    assert close(got["last"], [unit(3.0, 8.0), unit(0.0, -2.0)])
    assert close(got["cls"], [unit(3.0, 0.0), unit(0.0, -2.0)])
    assert close(got["mean_dims_1"], [[1.0], [0.0]])


def test_a_group_never_holds_more_tokens_than_the_engines_context():
    """llama.cpp runs a group in one micro-batch of at most its context: the group is cut to it."""
    model = FakeModel()  # context 8
    e = Embedder(model, "local/e", queue_max=2)
    e.answer([b"a"], _embed("r", "abcd", "efgh", "ij"))  # 3 x 4 padded tokens > 8
    while e.step() is not None:
        pass
    assert model.calls == [2, 1]


def test_the_llama_cpp_embedding_context_keeps_its_logits_buffer_bounded():
    from skulk.services.runner.llamacpp.embed import CONTEXT, MIN_CONTEXT, context_for

    assert context_for(8192, 49152) == 2560  # 512 MiB of float logits per token of a 49k vocabulary
    assert context_for(512, 30522) == 512  # BERT's own context is smaller
    assert context_for(0, 1000) == CONTEXT  # no trained context in the file: the cap
    assert context_for(32768, 262144) == MIN_CONTEXT  # a huge vocabulary: never below the floor
    assert context_for(1000, 1000) == 768 and context_for(128, 1000) == 128  # a multiple of 256 where it can be
