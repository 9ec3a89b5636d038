"""A request's chat as the chat template wants it (pure): messages with their tool calls and
tool results, and the template's extra variables (`tools`, `enable_thinking`,
`reasoning_effort`; a template that does not use one ignores it)."""

from __future__ import annotations

import json
from typing import Any

from skulk.cluster.state import ChatMessage, TaskParams


def template_message(m: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:  # templates read `tool_call.function.arguments` as a mapping (`| tojson`)
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": _arguments(c.arguments)}}
                             for c in m.tool_calls]
    if m.tool_call_id:
        out["tool_call_id"] = m.tool_call_id
    if m.name:
        out["name"] = m.name
    return out


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def template_inputs(params: TaskParams) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`(messages, kwargs)` for `tokenizer.apply_chat_template(messages, **kwargs)`."""
    kwargs: dict[str, Any] = {}
    if params.tools:
        kwargs["tools"] = json.loads(params.tools)
    if params.enable_thinking is not None:
        kwargs["enable_thinking"] = params.enable_thinking
    if params.reasoning_effort:
        kwargs["reasoning_effort"] = params.reasoning_effort
    return [template_message(m) for m in params.messages], kwargs
