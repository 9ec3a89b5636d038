"""OpenAI / upstream Skulk response shapes and SSE framing (pure)."""

from __future__ import annotations

import json
from typing import Any

from skulk.wire.inference import Done, Failed, FailReason, TokenChunk


def sse_comment(text: str) -> bytes:
    return f": {text}\n\n".encode()


def sse_data(obj: Any) -> bytes:
    payload = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


DONE = b"data: [DONE]\n\n"


def usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0,
                                          "rejected_prediction_tokens": 0}}


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
    return {"id": command_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta,
                         "logprobs": {"content": [lp]} if lp else None,
                         "finish_reason": finish_reason, "usage": None}],
            "usage": usage_obj, "service_tier": None}


def generation_stats(done: Done) -> dict[str, Any]:
    return {"prompt_tps": done.prompt_tps, "generation_tps": done.generation_tps,
            "prompt_tokens": done.prompt_tokens, "generation_tokens": done.completion_tokens,
            "peak_memory_usage": {"inBytes": done.peak_memory_bytes}}


def completion(command_id: str, model: str, created: int, text: str, chunks: list[TokenChunk],
               done: Done, want_logprobs: bool) -> dict[str, Any]:
    logprobs = None
    if want_logprobs:
        logprobs = {"content": [lp for c in chunks if (lp := token_logprob(c)) is not None]}
    return {"id": command_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0,
                         "message": {"role": "assistant", "content": text,
                                     "reasoning_content": None, "tool_calls": None},
                         "logprobs": logprobs, "finish_reason": done.finish_reason}],
            "usage": done_usage(done), "service_tier": None}


def done_usage(done: Done) -> dict[str, Any]:
    return usage(done.prompt_tokens, done.completion_tokens, done.cached_tokens)


FAIL_STATUS = {FailReason.BUSY: 503, FailReason.CONTEXT_LENGTH_EXCEEDED: 400, FailReason.BAD_REQUEST: 400}
"""The HTTP status of a runner's refusal or failure, by its reason (anything else: 500)."""


def fail_status(failed: Failed) -> int:
    return FAIL_STATUS.get(failed.reason, 500)  # type: ignore[call-overload]


def stream_error(message: str, status: int = 500) -> dict[str, Any]:
    """The SSE error event; client errors (400) are upstream's `invalid_request_error`."""
    if status == 400:
        return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": 400}}
    if status == 503:
        return {"error": {"message": message, "type": "ServiceUnavailable", "param": None, "code": 503}}
    return {"error": {"message": message, "type": "InternalServerError", "param": None, "code": 500}}
