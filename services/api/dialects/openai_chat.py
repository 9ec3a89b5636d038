"""`POST /v1/chat/completions` and `POST /bench/chat/completions`: the OpenAI chat adapter.

Streaming frames follow upstream exactly: `: keep-alive`, `: command_id <id>`, `data:` chunks,
a final chunk with `finish_reason` and `usage`, `: generation_stats {...}`, `data: [DONE]`;
an error is a `data: {"error": ...}` event then `[DONE]`. Non-streaming errors are real HTTP
errors in the envelope. Whatever happens, the client gets an answer.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import replace
from typing import Any

import falcon

from skulk.services.api.dialects import openai_format as fmt
from skulk.services.api.dialects.adapter import open_stream, parsed, respond
from skulk.services.api.dialects.fields import parse
from skulk.services.api.generate.generation import Generation, Stream, fail_status
from skulk.services.api.generate.timing import KeepAlive
from skulk.services.api.http.sse import sse_comment, sse_data
from skulk.wire.inference import Done, Failed, Progress, ProgressPhase, TokenChunk


class ChatResource:
    def __init__(self, generation: Generation, bench: bool = False) -> None:
        self.generation = generation
        self.bench = bench

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        params = parsed(req, parse)
        if self.bench:  # upstream: always a whole response, with the generation stats
            params = replace(params, stream=False)
        respond(resp, open_stream(self.generation, params), sse, self.whole)

    def whole(self, stream: Stream, chunks: list[TokenChunk], done: Done) -> dict[str, Any]:
        body = fmt.completion(stream.command_id, stream.params.model, stream.created, chunks, done,
                              stream.params.logprobs)
        if self.bench:
            body["generation_stats"] = fmt.generation_stats(done)
        return body


def sse(stream: Stream) -> Generator[bytes, None, None]:
    cid, model, created = stream.command_id, stream.params.model, stream.created
    yield sse_comment("keep-alive")
    yield sse_comment(f"command_id {cid}")
    for msg in stream:
        if isinstance(msg, KeepAlive):
            yield sse_comment("keep-alive")
        elif isinstance(msg, Progress) and msg.phase == ProgressPhase.PREFILL:
            yield sse_comment("prefill_progress " + json.dumps({"PrefillProgressChunk": {
                "processedTokens": msg.processed, "totalTokens": msg.total}}))
        elif isinstance(msg, TokenChunk):
            yield sse_data(fmt.stream_chunk(cid, model, created, msg.text, chunk=msg))
        elif isinstance(msg, Done):
            yield sse_data(fmt.stream_chunk(cid, model, created, "", finish_reason=msg.finish_reason,
                                            usage_obj=fmt.done_usage(msg)))
            yield sse_comment("generation_stats " + json.dumps(fmt.generation_stats(msg)))
            yield fmt.DONE
        elif isinstance(msg, Failed):
            yield sse_data(fmt.stream_error(msg.error, fail_status(msg.reason)))
            yield fmt.DONE
