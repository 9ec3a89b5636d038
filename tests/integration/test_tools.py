"""Tool calling through a real node with the `openai` SDK, on `skulk/demo-tools` (the demo
model with a Hermes/Qwen tool template, which mlx-lm reads with its `json_tools` parser): the
tools reach the template, an assistant's calls and the `tool` result go back in, and the
runner's tokenizer exposes the markers and parser that turn a model's call into `tool_calls`
(the parsing itself, on a forced output, is tests/unit/test_output_channels.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import openai
import pytest

from skulk.scripts.demo_tools import DIR_NAME, MODEL_ID, build_tools
from tests.integration.serving import wait_model_ready

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ASK = {"role": "user", "content": "What is the weather in Oslo?"}
CALLED = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}
ANSWERED = {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "Sunny, 21 degrees"}


@pytest.fixture
def tools_model(demo_model, tmp_path):
    (tmp_path / "models-tools").mkdir()
    return build_tools(tmp_path / "models-tools", demo_model)


def test_the_tools_variant_has_mlx_lms_tool_markers_and_parser(tools_model):
    probe = ("import sys, json; from pathlib import Path; from mlx_lm.tokenizer_utils import load; "
             "t = load(Path(sys.argv[1])); "
             "print(json.dumps([t.has_tool_calling, t.tool_call_start, t.tool_call_end, "
             "t.tool_parser('{\"name\": \"f\", \"arguments\": {\"x\": 1}}', None)]))")
    out = subprocess.run([sys.executable, "-c", probe, str(tools_model)], capture_output=True, text=True,
                         timeout=120, check=True)
    assert json.loads(out.stdout) == [True, "<tool_call>", "</tool_call>", {"name": "f", "arguments": {"x": 1}}]


def test_tools_and_tool_results_go_through_the_template(nodes, tools_model):
    node = nodes(args=("--place", MODEL_ID), models={DIR_NAME: tools_model})
    wait_model_ready(node)
    c = openai.OpenAI(base_url=f"{node.url}/v1", api_key="none", max_retries=0, timeout=60)

    def ask(messages, tools=None, stream=False):
        kw = {"tools": tools} if tools else {}
        return c.chat.completions.create(model=MODEL_ID, max_tokens=8, temperature=0, messages=messages,
                                         stream=stream, **kw)

    plain, with_tools = ask([ASK]), ask([ASK], TOOLS)
    assert with_tools.usage.prompt_tokens > plain.usage.prompt_tokens + 20  # the tool list is in the prompt
    looped = ask([ASK, CALLED, ANSWERED], TOOLS)  # the full loop: the call and its result go back in
    assert looped.choices[0].finish_reason in ("stop", "length")
    assert looped.usage.prompt_tokens > with_tools.usage.prompt_tokens + 20
    streamed = list(ask([ASK, CALLED, ANSWERED], TOOLS, stream=True))
    assert "".join(ch.choices[0].delta.content or "" for ch in streamed) == looped.choices[0].message.content
    with pytest.raises(openai.BadRequestError, match="tools"):
        c.chat.completions.create(model=MODEL_ID, max_tokens=4, messages=[ASK], tools=[{"type": "function"}])
