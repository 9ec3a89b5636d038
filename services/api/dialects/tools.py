"""The tool-calling and thinking fields of an OpenAI chat request (pure): `tools`, the tool
calls of assistant messages and the results of `tool` messages, `enable_thinking` and
`reasoning_effort`. They go to the model's chat template; the runner parses the model's calls
with mlx-lm's tool parser for that model."""

from __future__ import annotations

import json
from typing import Any

from skulk.cluster.state import ToolCall
from skulk.services.api.http.errors import ApiError

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


def tools_of(body: dict[str, Any]) -> str:
    """The `tools` list as JSON text (every entry a function with a name), or ""."""
    tools = body.get("tools")
    if tools in (None, []):
        return ""
    if not isinstance(tools, list):
        raise ApiError(400, "tools must be a list")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ApiError(400, f"tools[{i}] must be {{type: 'function', function: {{name, parameters}}}}")
    return json.dumps(tools)


def thinking_of(body: dict[str, Any]) -> dict[str, Any]:
    enable = body.get("enable_thinking")
    if enable is not None and not isinstance(enable, bool):
        raise ApiError(400, "enable_thinking must be a boolean")
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in EFFORTS:
        raise ApiError(400, f"reasoning_effort must be one of {list(EFFORTS)}")
    return {"enable_thinking": enable, "reasoning_effort": effort or ""}


def calls_of(message: dict[str, Any], index: int) -> tuple[ToolCall, ...]:
    """An assistant message's `tool_calls`, given back in a multi-turn chat."""
    raw = message.get("tool_calls")
    if raw in (None, []):
        return ()
    if not isinstance(raw, list):
        raise ApiError(400, f"messages[{index}].tool_calls must be a list")
    calls = []
    for j, call in enumerate(raw):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ApiError(400, f"messages[{index}].tool_calls[{j}] needs function.name")
        args = fn.get("arguments", "{}")
        calls.append(ToolCall(id=str(call.get("id", f"call_{j}")), name=fn["name"],
                              arguments=args if isinstance(args, str) else json.dumps(args)))
    return tuple(calls)


def tool_result_of(message: dict[str, Any], index: int) -> dict[str, str]:
    """A `tool` message's call id and function name (for templates that show them)."""
    if message.get("role") != "tool":
        return {}
    call_id, name = message.get("tool_call_id", ""), message.get("name", "")
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise ApiError(400, f"messages[{index}].tool_call_id and name must be strings")
    return {"tool_call_id": call_id, "name": name}
