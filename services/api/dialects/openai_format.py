"""OpenAI chat completion shapes as upstream Skulk frames them (pure; docs/architecture.md,
"Compatibility with upstream Skulk")."""

from __future__ import annotations

from typing import Any

from skulk.cluster.state import ToolCall
from skulk.services.api.http.schema import INTEGER, NUMBER, STRING, Schema, array, enum, nullable, obj
from skulk.wire.inference import Done, TokenChunk

DONE = b"data: [DONE]\n\n"


def usage(prompt: int, completion: int, cached: int = 0, accepted: int = 0, rejected: int = 0) -> dict[str, Any]:
    """OpenAI's usage; `accepted`/`rejected`: speculative drafts the model kept / threw away."""
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": accepted,
                                          "rejected_prediction_tokens": rejected}}


def token_logprob(chunk: TokenChunk) -> dict[str, Any] | None:
    if chunk.logprob is None:
        return None
    return {"token": chunk.token_bytes.decode(errors="replace"), "logprob": chunk.logprob,
            "bytes": list(chunk.token_bytes),
            "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": list(t.token_bytes)}
                             for t in chunk.top_logprobs]}


def stream_chunk(command_id: str, model: str, created: int, content: str | None,
                 chunk: TokenChunk | None = None, finish_reason: str | None = None,
                 usage_obj: dict[str, Any] | None = None) -> dict[str, Any]:
    """One `data:` chunk exactly as upstream frames it (object is "chat.completion")."""
    lp = token_logprob(chunk) if chunk is not None else None
    delta: dict[str, Any] = {"role": "assistant", "content": content}
    if chunk is not None and chunk.reasoning:  # thinking text: its own field, as upstream
        delta = {"role": "assistant", "reasoning_content": content}
    elif chunk is not None and chunk.tool_calls:  # one chunk with every call
        delta = {"role": "assistant", "content": None, "tool_calls": tool_calls_json(chunk.tool_calls)}
    return {"id": command_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta,
                         "logprobs": {"content": [lp]} if lp else None,
                         "finish_reason": finish_reason, "usage": None}],
            "usage": usage_obj, "service_tier": None}


def generation_stats(done: Done) -> dict[str, Any]:
    return {"prompt_tps": done.prompt_tps, "generation_tps": done.generation_tps,
            "prompt_tokens": done.prompt_tokens, "generation_tokens": done.completion_tokens,
            "peak_memory_usage": {"inBytes": done.peak_memory_bytes},
            "accepted_prediction_tokens": done.accepted_prediction_tokens,
            "rejected_prediction_tokens": done.rejected_prediction_tokens}


def tool_calls_json(calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
    return [{"id": c.id, "index": i, "type": "function",
             "function": {"id": c.id, "name": c.name, "arguments": c.arguments}} for i, c in enumerate(calls)]


def completion(command_id: str, model: str, created: int, chunks: list[TokenChunk],
               done: Done, want_logprobs: bool) -> dict[str, Any]:
    logprobs = None
    if want_logprobs:
        logprobs = {"content": [lp for c in chunks if (lp := token_logprob(c)) is not None]}
    text = "".join(c.text for c in chunks if not c.reasoning)
    reasoning = "".join(c.text for c in chunks if c.reasoning)
    calls = tuple(call for c in chunks for call in c.tool_calls)
    return {"id": command_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0,
                         "message": {"role": "assistant", "content": text,
                                     "reasoning_content": reasoning or None,
                                     "tool_calls": tool_calls_json(calls) if calls else None},
                         "logprobs": logprobs, "finish_reason": done.finish_reason}],
            "usage": done_usage(done), "service_tier": None}


def done_usage(done: Done) -> dict[str, Any]:
    return usage(done.prompt_tokens, done.completion_tokens, done.cached_tokens,
                 done.accepted_prediction_tokens, done.rejected_prediction_tokens)


def stream_error(message: str, status: int = 500) -> dict[str, Any]:
    """The SSE error event; client errors (400) are upstream's `invalid_request_error`."""
    if status == 400:
        return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": 400}}
    if status == 499:
        return {"error": {"message": message, "type": "cancelled", "param": None, "code": 499}}
    if status == 503:
        return {"error": {"message": message, "type": "ServiceUnavailable", "param": None, "code": 503}}
    return {"error": {"message": message, "type": "InternalServerError", "param": None, "code": 500}}


USAGE: Schema = obj({"prompt_tokens": INTEGER, "completion_tokens": INTEGER, "total_tokens": INTEGER})
CHAT_COMPLETION: Schema = obj({
    "id": STRING, "object": enum("chat.completion"), "created": INTEGER, "model": STRING,
    "choices": array(obj({"index": INTEGER, "message": obj({"role": enum("assistant"), "content": STRING}),
                          "logprobs": nullable(obj({"content": array({"type": "object"})})),
                          "finish_reason": STRING}), min_items=1),
    "usage": USAGE})
"""`completion(...)`: a whole (non-streaming) chat completion."""
GENERATION_STATS: Schema = obj({"prompt_tps": NUMBER, "generation_tps": NUMBER, "prompt_tokens": INTEGER,
                                "generation_tokens": INTEGER,
                                "peak_memory_usage": obj({"inBytes": INTEGER})})
BENCH_COMPLETION: Schema = {**CHAT_COMPLETION, "required": [*CHAT_COMPLETION["required"], "generation_stats"],
                            "properties": {**CHAT_COMPLETION["properties"], "generation_stats": GENERATION_STATS}}
"""`POST /bench/chat/completions`: the completion plus `generation_stats`."""
