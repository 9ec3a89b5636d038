"""`POST /v1/chat/completions`: validate, route through the master once, stream from the runner.

Streaming frames follow upstream exactly: `: keep-alive`, `: command_id <id>`, `data:` chunks,
a final chunk with `finish_reason` and `usage`, `: generation_stats {...}`, `data: [DONE]`;
an error is a `data: {"error": ...}` event then `[DONE]`. Non-streaming errors are HTTP 500
with the envelope (the runbook's promise). Whatever happens, the client gets an answer.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Iterator

import falcon

from skulk.services.api import openai_format as fmt
from skulk.services.api.chat_request import ApiError, check_context, parse
from skulk.services.api.gateway import Gateway, KeepAlive
from skulk.services.api.replica import StateReplica
from skulk.services.api.resources.common import command, http_error, json_body, state_or_503
from skulk.wire.commands import NO_INSTANCE, Routed, TaskCancelled, TaskFinished, TextGeneration
from skulk.wire.inference import Done, Failed, Progress, TokenChunk
from skulk.wire.state import Instance, TaskParams


class ChatResource:
    def __init__(self, gateway: Gateway, replica: StateReplica, node_id: str) -> None:
        self.gateway = gateway
        self.replica = replica
        self.node_id = node_id

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            params = parse(json_body(req))
        except ApiError as exc:
            raise http_error(exc.status, exc.message) from None
        state = state_or_503(self.replica)
        limits = [i.context_token_limit for i in state.instances.values() if i.model_id == params.model]
        if not limits:
            raise http_error(404, NO_INSTANCE.format(model=params.model))
        default_budget = params.max_tokens == 0  # the runner fits it to the prompt it tokenizes
        try:
            params = check_context(params, max(limits))
        except ApiError as exc:
            raise http_error(exc.status, exc.message) from None
        command_id = uuid.uuid4().hex
        routed = command(self.gateway, TextGeneration(command_id=command_id, owner_node=self.node_id,
                                                      params=params))
        assert isinstance(routed, Routed)
        created = int(time.time())
        messages = self._admitted(routed, params, state.instances.get(routed.instance_id), default_budget)
        if params.stream:
            resp.content_type = "text/event-stream"
            resp.set_headers({"Cache-Control": "no-cache", "Connection": "close",
                              "X-Accel-Buffering": "no"})
            resp.stream = self._sse(routed, params, created, messages)
            return
        self._complete(resp, routed, params, created, messages)

    def _admitted(self, routed: Routed, params: TaskParams, inst: Instance | None,
                  default_budget: bool) -> Iterator[object]:
        """The runner's stream, once it has admitted the request: a refusal (busy, context too
        long) comes back at once and is this response's status (503, 400), streaming or not."""
        stream = self.gateway.stream(routed.endpoint, routed.command_id, routed.task_id, routed.instance_id,
                                     routed.runner_id, params, inst.context_token_limit if inst else 0,
                                     default_budget)
        first = next(stream)
        if isinstance(first, Failed):
            self._finish(routed, ok=False, cancelled=False, error=first.error)
            raise http_error(fmt.fail_status(first), first.error)
        return itertools.chain([first], stream)

    def _finish(self, routed: Routed, ok: bool, cancelled: bool, error: str = "") -> None:
        cmd = (TaskCancelled(command_id=uuid.uuid4().hex, cancelled_command_id=routed.command_id)
               if cancelled else TaskFinished(command_id=uuid.uuid4().hex,
                                              finished_command_id=routed.command_id,
                                              failed=not ok, error_message=error))
        self.gateway.tell(cmd)

    def _sse(self, routed: Routed, params: TaskParams, created: int, messages: Iterator[object]) -> Iterator[bytes]:
        cid, model = routed.command_id, params.model
        outcome: tuple[bool, str] | None = None
        try:
            yield fmt.sse_comment("keep-alive")
            yield fmt.sse_comment(f"command_id {cid}")
            for msg in messages:
                if isinstance(msg, KeepAlive):
                    yield fmt.sse_comment("keep-alive")
                elif isinstance(msg, Progress) and msg.phase == "prefill":
                    yield fmt.sse_comment("prefill_progress " + json.dumps({"PrefillProgressChunk": {
                        "processedTokens": msg.processed, "totalTokens": msg.total}}))
                elif isinstance(msg, TokenChunk):
                    yield fmt.sse_data(fmt.stream_chunk(cid, model, created, msg.text, chunk=msg))
                elif isinstance(msg, Done):
                    outcome = (True, "")
                    yield fmt.sse_data(fmt.stream_chunk(
                        cid, model, created, "", finish_reason=msg.finish_reason,
                        usage_obj=fmt.done_usage(msg)))
                    yield fmt.sse_comment("generation_stats " + json.dumps(fmt.generation_stats(msg)))
                    yield fmt.DONE
                    return
                elif isinstance(msg, Failed):
                    outcome = (False, msg.error)
                    yield fmt.sse_data(fmt.stream_error(msg.error, fmt.fail_status(msg)))
                    yield fmt.DONE
                    return
        finally:
            if outcome is None:  # the client went away (or the server is stopping)
                self.gateway.cancel(routed.endpoint, cid)
            self._finish(routed, ok=bool(outcome and outcome[0]), cancelled=outcome is None,
                         error=outcome[1] if outcome else "")

    def _complete(self, resp: falcon.Response, routed: Routed, params: TaskParams, created: int,
                  messages: Iterator[object]) -> None:
        chunks: list[TokenChunk] = []
        outcome: tuple[bool, str] | None = None
        try:
            for msg in messages:
                if isinstance(msg, TokenChunk):
                    chunks.append(msg)
                elif isinstance(msg, Done):
                    outcome = (True, "")
                    resp.media = fmt.completion(routed.command_id, params.model, created,
                                                "".join(c.text for c in chunks), chunks, msg,
                                                params.logprobs)
                    return
                elif isinstance(msg, Failed):
                    outcome = (False, msg.error)
                    raise http_error(fmt.fail_status(msg), msg.error)
        finally:
            if outcome is None:
                self.gateway.cancel(routed.endpoint, routed.command_id)
            self._finish(routed, ok=bool(outcome and outcome[0]), cancelled=outcome is None,
                         error=outcome[1] if outcome else "")
