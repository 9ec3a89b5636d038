"""`POST /v1/completions`: the OpenAI legacy (prompt) completions adapter.

The prompt is tokenized as given, without the chat template (`TaskParams.prompt`). A list of
prompts is accepted only with one entry (one choice per request, as the rest of the API);
token-id prompts are refused. `echo` prefixes the prompt to the text.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import falcon

from skulk.cluster.state import TaskParams
from skulk.services.api.dialects import openai_chat as fmt
from skulk.services.api.dialects.adapter import open_stream, respond, sse_comment, sse_data
from skulk.services.api.dialects.fields import (
    FLAG,
    POSITIVE,
    SAMPLING,
    STOPS,
    ApiError,
    flag,
    max_tokens_of,
    model_of,
    require_object,
    sampling,
    stops_of,
)
from skulk.services.api.generate.errors import fail_status
from skulk.services.api.generate.generation import Generation
from skulk.services.api.generate.stream import Stream
from skulk.services.api.generate.timing import KeepAlive
from skulk.services.api.http.errors import http_error
from skulk.services.api.http.request_body import json_body
from skulk.services.api.http.schema import INTEGER, STRING, TEXT, Schema, array, enum, nullable, obj, one_of
from skulk.wire.inference import Done, Failed, TokenChunk


def parse_completion(body: Any) -> TaskParams:
    body = require_object(body)
    model = model_of(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise ApiError(400, "prompt must be a string (or a list of one string)")
    if not prompt:
        raise ApiError(400, "the request has no content to generate from "
                            "(messages / input must contain a non-empty message)")
    if body.get("n", 1) != 1 or body.get("best_of", 1) != 1:
        raise ApiError(400, "n and best_of must be 1")
    return TaskParams(model=model, messages=(), prompt=prompt, max_tokens=max_tokens_of(body, "max_tokens"),
                      stream=flag(body, "stream"), stop=stops_of(body), **sampling(body))



COMPLETION_REQUEST: Schema = obj(
    {"model": TEXT, "prompt": one_of(TEXT, {**array(TEXT, min_items=1), "maxItems": 1})},
    {"max_tokens": POSITIVE, "stream": FLAG, "stop": STOPS, "echo": FLAG, "n": enum(1), "best_of": enum(1),
     **SAMPLING})
"""What `parse_completion` (and `echo`) accept."""

def _choice(text: str, finish_reason: str | None) -> dict[str, Any]:
    return {"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason}


def _body(stream: Stream, choice: dict[str, Any], usage: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": f"cmpl-{stream.command_id}", "object": "text_completion", "created": stream.created,
            "model": stream.params.model, "choices": [choice], "usage": usage}



TEXT_COMPLETION: Schema = obj({
    "id": STRING, "object": enum("text_completion"), "created": INTEGER, "model": STRING,
    "choices": array(obj({"text": STRING, "index": INTEGER, "finish_reason": nullable(STRING)}), min_items=1),
    "usage": nullable(obj({"prompt_tokens": INTEGER, "completion_tokens": INTEGER, "total_tokens": INTEGER}))})
"""`_body(...)`: the whole answer, and each streamed chunk."""

class CompletionsResource:
    def __init__(self, generation: Generation) -> None:
        self.generation = generation

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = json_body(req)
        try:
            params, echo = parse_completion(body), flag(body, "echo")
        except ApiError as exc:
            raise http_error(exc.status, exc.message) from None
        echo_text = params.prompt if echo else ""
        respond(resp, open_stream(self.generation, params), lambda stream: sse(stream, echo_text),
                lambda stream, chunks, done: _body(stream, _choice(echo_text + "".join(c.text for c in chunks),
                                                                   done.finish_reason), fmt.done_usage(done)))


def sse(stream: Stream, echo: str) -> Generator[bytes, None, None]:
    yield sse_comment(f"command_id {stream.command_id}")
    if echo:
        yield sse_data(_body(stream, _choice(echo, None), None))
    for msg in stream:
        if isinstance(msg, KeepAlive):
            yield sse_comment("keep-alive")
        elif isinstance(msg, TokenChunk):
            yield sse_data(_body(stream, _choice(msg.text, None), None))
        elif isinstance(msg, Done):
            yield sse_data(_body(stream, _choice("", msg.finish_reason), fmt.done_usage(msg)))
            yield fmt.DONE
        elif isinstance(msg, Failed):
            yield sse_data(fmt.stream_error(msg.error, fail_status(msg.reason)))
            yield fmt.DONE
