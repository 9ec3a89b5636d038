"""Request validation, stop strings, OpenAI/SSE shapes, `/state` JSON and model cards (pure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skulk.cluster.state import RunnerStatus, State, ToolCall
from skulk.node.model_cards import card_from_dir, scan
from skulk.services.api.dialects import adapter as sse
from skulk.services.api.dialects import openai_chat as fmt
from skulk.services.api.dialects.fields import ApiError
from skulk.services.api.dialects.openai_chat import parse
from skulk.services.api.generate.errors import GenerationError
from skulk.services.api.generate.errors import context_checked as check_context
from skulk.services.api.observe.state_json import runner_json, state_json
from skulk.services.runner.stops import StopMatcher
from skulk.wire.inference import Done, TokenChunk, TopLogprob
from skulk.wire.models import ModelDirError, dir_name

OK = {"model": "m/x", "messages": [{"role": "user", "content": "hi"}]}


def test_parse_fills_fields_and_ignores_unknown_ones():
    p = parse({**OK, "stream": True, "temperature": 0, "stop": "END", "seed": 3, "logprobs": True,
               "top_logprobs": 2, "frequency_penalty": 1.0, "user": "u",
               "messages": [{"role": "system", "content": [{"type": "text", "text": "a"},
                                                           {"type": "text", "text": "b"}]},
                            {"role": "user", "content": "hi"}]})
    assert p.stream and p.temperature == 0.0 and p.stop == ("END",) and p.seed == 3
    assert p.messages[0].content == "ab" and p.top_logprobs == 2 and p.max_tokens == 0


@pytest.mark.parametrize("body,needle", [
    ([], "JSON object"), ({"messages": []}, "model is required"), ({"model": "m"}, "messages is required"),
    ({**OK, "messages": [{"role": "wizard", "content": "x"}]}, "needs a role"),
    ({**OK, "messages": [{"role": "user", "content": ""}]}, "no content"),
    ({**OK, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "only text parts"),
    ({**OK, "max_tokens": 0}, "positive integer"), ({**OK, "max_tokens": True}, "positive integer"),
    ({**OK, "temperature": 5}, "temperature"), ({**OK, "top_k": -1}, "top_k"),
    ({**OK, "stop": [1]}, "stop"), ({**OK, "stream": "yes"}, "stream"), ({**OK, "seed": 1.5}, "seed"),
    ({**OK, "top_logprobs": 50}, "top_logprobs"),
])
def test_parse_rejects_bad_fields_with_400(body, needle):
    with pytest.raises(ApiError) as err:
        parse(body)
    assert err.value.status == 400 and needle in err.value.message


def test_context_check_and_default_budget():
    assert check_context(parse(OK), 100).max_tokens == 100
    assert check_context(parse({**OK, "max_tokens": 50}), 100).max_tokens == 50
    with pytest.raises(GenerationError, match="^context_length_exceeded: max_tokens \\(101\\)") as err:
        check_context(parse({**OK, "max_tokens": 101}), 100)
    assert (err.value.status, err.value.reason) == (400, "context_length_exceeded")


@pytest.mark.parametrize("pieces,stops,emitted,hit", [
    (["Hello ", "wor", "ld"], (), "Hello world", False),
    (["Hello E", "ND tail"], ("END",), "Hello ", True),
    (["abc", "EN", "x"], ("END",), "abcENx", False),
    (["xxSTO", "P"], ("STOP", "xx"), "", True),
])
def test_stop_matcher_holds_back_possible_prefixes(pieces, stops, emitted, hit):
    m = StopMatcher(stops)
    out, stopped = "", False
    for p in pieces:
        text, stopped = m.feed(p)
        out += text
        if stopped:
            break
    if not stopped:
        out += m.flush()
    assert (out, stopped) == (emitted, hit)


def test_sse_frames_and_error_events():
    assert sse.sse_comment("keep-alive") == b": keep-alive\n\n"
    assert fmt.DONE == b"data: [DONE]\n\n"
    chunk = TokenChunk(request_id="r", seq=0, text="hi", token=5, logprob=-0.5, token_bytes=b"hi",
                       top_logprobs=(TopLogprob(token="hi", logprob=-0.5, token_bytes=b"hi"),))
    body = fmt.stream_chunk("cid", "m/x", 1, "hi", chunk=chunk)
    assert body["object"] == "chat.completion" and body["choices"][0]["delta"] == {"role": "assistant", "content": "hi"}
    assert body["choices"][0]["logprobs"]["content"][0]["bytes"] == [104, 105]
    assert json.loads(sse.sse_data(body)[6:]) == body
    assert fmt.stream_error("boom")["error"] == {"message": "boom", "type": "InternalServerError",
                                                 "param": None, "code": 500}
    assert fmt.stream_error("context_length_exceeded: x", 400)["error"]["code"] == 400
    done = Done(request_id="r", seq=1, finish_reason="length", prompt_tokens=3, completion_tokens=2,
                prompt_tps=1.0, generation_tps=2.0, peak_memory_bytes=7)
    full = fmt.completion("cid", "m/x", 1, [chunk], done, want_logprobs=False)
    assert full["usage"]["total_tokens"] == 5 and full["choices"][0]["finish_reason"] == "length"
    assert full["choices"][0]["message"]["content"] == "hi"


def test_reasoning_and_tool_calls_take_their_own_fields():
    think = TokenChunk(request_id="r", seq=0, text="hmm", token=1, reasoning=True)
    said = TokenChunk(request_id="r", seq=1, text="ok", token=2)
    call = ToolCall(id="call_1", name="get_weather", arguments='{"city": "Oslo"}')
    calls = TokenChunk(request_id="r", seq=2, text="", token=3, tool_calls=(call,))
    assert fmt.stream_chunk("c", "m", 1, "hmm", chunk=think)["choices"][0]["delta"] == \
        {"role": "assistant", "reasoning_content": "hmm"}
    delta = fmt.stream_chunk("c", "m", 1, "", chunk=calls)["choices"][0]["delta"]
    assert delta["content"] is None and delta["tool_calls"] == [
        {"id": "call_1", "index": 0, "type": "function",
         "function": {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'}}]
    done = Done(request_id="r", seq=3, finish_reason="tool_calls", prompt_tokens=3, completion_tokens=3,
                prompt_tps=1.0, generation_tps=2.0, peak_memory_bytes=7)
    msg = fmt.completion("c", "m", 1, [think, said, calls], done, want_logprobs=False)["choices"][0]
    assert msg["finish_reason"] == "tool_calls"
    assert (msg["message"]["content"], msg["message"]["reasoning_content"]) == ("ok", "hmm")
    assert msg["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_tool_fields_parse_into_the_common_parameters():
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    params = parse({**OK, "tools": tools, "enable_thinking": False, "reasoning_effort": "low", "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_9", "name": "get_weather", "content": "sunny"}]})
    assert json.loads(params.tools) == tools and (params.enable_thinking, params.reasoning_effort) == (False, "low")
    assistant, tool = params.messages[1], params.messages[2]
    assert assistant.tool_calls == (ToolCall(id="call_9", name="get_weather", arguments='{"city":"Oslo"}'),)
    assert (tool.role, tool.tool_call_id, tool.name, tool.content) == ("tool", "call_9", "get_weather", "sunny")
    for bad in ({"tools": "x"}, {"tools": [{"type": "function"}]}, {"reasoning_effort": "max"},
                {"enable_thinking": "yes"}):
        with pytest.raises(ApiError):
            parse({**OK, **bad})


def test_response_format_becomes_a_grammar_or_a_400():
    from skulk.services.api.dialects.fields import grammar_of
    from skulk.services.api.dialects.ollama import ollama_format

    assert grammar_of(None) == "" and grammar_of({"type": "text"}) == ""
    assert grammar_of({"type": "json_object"}) and grammar_of(ollama_format("json"))
    assert grammar_of({"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object"}}})
    for bad in ({"type": "xml"}, "json", {"type": "json_schema", "json_schema": {"schema": 3}}):
        with pytest.raises(ApiError):
            grammar_of(bad)


def test_state_json_uses_upstream_shapes():
    assert runner_json(RunnerStatus(kind="RunnerReady", endpoint="tcp://x")) == {"RunnerReady": {}}
    assert runner_json(RunnerStatus(kind="RunnerLoading", layers_loaded=1, total_layers=4)) == \
        {"RunnerLoading": {"layersLoaded": 1, "totalLayers": 4}}
    assert runner_json(RunnerStatus(kind="RunnerFailed", error_message="e")) == {"RunnerFailed": {"errorMessage": "e"}}
    keys = set(state_json(State()))
    assert {"instances", "runners", "tasks", "lastSeen", "topology", "nodeMemory", "nodeIdentities",
            "lastEventAppliedIdx", "nodeHealth"} <= keys


def test_model_cards_from_directories(tmp_path: Path):
    good = tmp_path / "org--model"
    good.mkdir()
    (good / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64, "num_key_value_heads": 2,
        "max_position_embeddings": 512, "quantization": {"bits": 4, "group_size": 64}}))
    (good / "model.safetensors").write_bytes(b"x" * 100)
    for name, files in {"bad--noconfig": {}, "nodashes": {"config.json": "{}"},
                        "bad--garbage": {"config.json": "{not json", "model.safetensors": ""},
                        "bad--noweights": {"config.json": json.dumps({"num_hidden_layers": 1,
                                                                      "hidden_size": 1})}}.items():
        d = tmp_path / name
        d.mkdir()
        for fname, text in files.items():
            (d / fname).write_text(text)
    cards, rejected = scan(tmp_path)
    card = cards["org/model"]
    assert (card.n_layers, card.storage_size_bytes, card.quantization, card.supports_tensor,
            card.context_length) == (2, 100, "4bit", True, 512)
    assert set(rejected) == {"bad--noconfig", "nodashes", "bad--garbage", "bad--noweights"}
    with pytest.raises(ModelDirError):
        dir_name("../etc/passwd")
    with pytest.raises(ModelDirError):
        card_from_dir(tmp_path / "bad--garbage")


def test_an_integer_beyond_64_bits_is_named_by_its_path():
    from skulk.services.api.http.request_body import out_of_range

    assert out_of_range({"min_nodes": 100000000000000000000}) == "min_nodes"
    assert out_of_range({"messages": [{"n": 1}, {"n": -(2 ** 63)}]}) == "messages[1].n"
    assert out_of_range(2 ** 64) == ""
    assert out_of_range({"max_tokens": 2 ** 62, "ok": True, "x": [1.5e300]}) is None
