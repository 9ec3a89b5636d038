"""A request's output split into thinking, tool calls and content (pure), and a forced
tool-call output through the batch loop: parsed with mlx-lm's own tool parser."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from skulk.cluster.state import ChatMessage, TaskParams
from skulk.services.runner.batcher import Batcher
from skulk.services.runner.channels import ThinkSplitter, ToolCallScanner
from skulk.services.runner.engine import OutputFormat
from skulk.services.runner.fake_engine import FakeEngine
from skulk.services.runner.scheduler import Limits
from skulk.wire.inference import Done, Generate, TokenChunk
from tests.unit.batcher_driver import run


def _mlx_lm_tool_parser(name: str):
    """mlx-lm's own parser module, loaded from its file: importing the `mlx_lm` package would
    load MLX into the test process, which the suite keeps out."""
    root = Path(importlib.util.find_spec("mlx_lm").origin).parent
    spec = importlib.util.spec_from_file_location(f"tool_parser_{name}", root / "tool_parsers" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


json_tools = _mlx_lm_tool_parser("json_tools")
TOOLS = json.dumps([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])
JSON_TOOLS = OutputFormat(tools=(json_tools.tool_call_start, json_tools.tool_call_end),
                          parse_tool=json_tools.parse_tool_call)


@pytest.mark.parametrize("pieces", [["<think>ab</think>cd"], ["<thi", "nk>a", "b</th", "ink>c", "d"],
                                    list("<think>ab</think>cd")])
def test_thinking_is_split_out_however_the_markers_arrive(pieces):
    s = ThinkSplitter("<think>", "</think>")
    out = [piece for p in pieces for piece in s.feed(p)] + s.flush()
    assert "".join(t for t, r in out if r) == "ab" and "".join(t for t, r in out if not r) == "cd"


def test_a_prompt_that_opened_thinking_starts_inside_it():
    s = ThinkSplitter("<think>", "</think>", inside=True)
    assert s.feed("plan</think>answer") == [("plan", True), ("answer", False)]


@pytest.mark.parametrize("pieces", [['x<tool_call>{"a": 1}</tool_call>y'], list('x<tool_call>{"a": 1}</tool_call>y')])
def test_tool_call_blocks_are_cut_out_of_the_content(pieces):
    s = ToolCallScanner("<tool_call>", "</tool_call>")
    content, calls = "", []
    for p in pieces:
        text, found = s.feed(p)
        content, calls = content + text, calls + found
    assert (content + s.flush(), calls) == ("xy", ['{"a": 1}'])


def test_an_unterminated_call_is_content():
    s = ToolCallScanner("<tool_call>", "</tool_call>")
    assert s.feed("a<tool_call>{") == ("a", []) and s.flush() == "<tool_call>{"


def request(tools: str, text: str = "weather?") -> Generate:
    return Generate(request_id="r1", task_id="t", params=TaskParams(
        model="m", messages=(ChatMessage(role="user", content=text),), max_tokens=200, tools=tools))


def test_a_forced_tool_call_output_becomes_one_call_and_finish_reason_tool_calls():
    forced = 'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    b = Batcher(FakeEngine(model_context=1000, script=forced, format=JSON_TOOLS), Limits(max_batch=2, queue_max=0))
    b.on_generate([b"r1"], request(TOOLS), 0.0)
    msgs = run(b)["r1"]
    chunks = [m for m in msgs if isinstance(m, TokenChunk)]
    assert "".join(c.text for c in chunks) == "Let me check."
    (with_calls,) = [c for c in chunks if c.tool_calls]
    (call,) = with_calls.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Oslo"})
    assert isinstance(msgs[-1], Done) and msgs[-1].finish_reason == "tool_calls"


def test_without_tools_in_the_request_the_same_output_is_plain_text():
    forced = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    b = Batcher(FakeEngine(model_context=1000, script=forced, format=JSON_TOOLS), Limits(max_batch=2, queue_max=0))
    b.on_generate([b"r1"], request(""), 0.0)
    msgs = run(b)["r1"]
    assert "".join(m.text for m in msgs if isinstance(m, TokenChunk)) == forced
    assert msgs[-1].finish_reason == "stop"


def test_a_call_the_parser_cannot_read_stays_text():
    forced = "<tool_call>not json</tool_call>"
    b = Batcher(FakeEngine(model_context=1000, script=forced, format=JSON_TOOLS), Limits(max_batch=2, queue_max=0))
    b.on_generate([b"r1"], request(TOOLS), 0.0)
    msgs = run(b)["r1"]
    assert "".join(m.text for m in msgs if isinstance(m, TokenChunk)) == forced and msgs[-1].finish_reason == "stop"


def test_thinking_text_is_marked_reasoning():
    fmt = OutputFormat(think=("<think>", "</think>"))
    b = Batcher(FakeEngine(model_context=1000, script="<think>hm</think>ok", format=fmt),
                Limits(max_batch=2, queue_max=0))
    b.on_generate([b"r1"], request(""), 0.0)
    chunks = [m for m in run(b)["r1"] if isinstance(m, TokenChunk)]
    assert "".join(c.text for c in chunks if c.reasoning) == "hm"
    assert "".join(c.text for c in chunks if not c.reasoning) == "ok"
