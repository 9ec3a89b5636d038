"""One request's life on rank 0: its place in the wait queue or the batch, its text (streaming
detokenizer, thinking and tool-call channels, stop strings), its logprobs and its own stats.

`Session.on_token` turns the engine's tokens into the client's messages; the last message of
a session is its `Done`. Times are `time.monotonic()` values passed in by the loop.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from skulk.cluster.state import TaskParams, ToolCall
from skulk.services.runner.channels import ThinkSplitter, ToolCallScanner
from skulk.services.runner.engine import Engine, OutputFormat, TokenOut
from skulk.services.runner.stops import StopMatcher
from skulk.wire.inference import Done, TokenChunk, TopLogprob

log = logging.getLogger("skulk.runner")


@dataclass
class Session:
    request_id: str
    envelope: list[bytes]
    params: TaskParams
    prompt: list[int]
    seed: int
    admitted_at: float
    uid: int = -1  # the engine's uid once inserted into the batch
    task_id: str = ""  # the master's task (log lines carry it with the request id)
    trace: bool = False  # the leader stamped the task as traced: its spans are recorded
    inserted_at: float = 0.0
    prefilled_at: float = 0.0
    first_token_at: float = 0.0
    last_token_at: float = 0.0
    cached: int = 0
    seq: int = 0
    completion_tokens: int = 0
    accepted: int = 0  # speculative drafts the model kept
    rejected: int = 0  # ... and threw away
    done: bool = False
    stops: StopMatcher = field(init=False)
    detok: Any = None
    fmt: OutputFormat = field(default_factory=OutputFormat)
    tool_calls: list[ToolCall] = field(default_factory=list)
    think: ThinkSplitter | None = field(init=False, default=None)
    tools: ToolCallScanner | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.stops = StopMatcher(self.params.stop)
        if self.fmt.think:
            ids = self.fmt.think_start_ids
            opened = bool(ids) and tuple(self.prompt[-len(ids):]) == ids  # the template opened it
            self.think = ThinkSplitter(*self.fmt.think, inside=opened)
        if self.fmt.tools and self.fmt.parse_tool and self.params.tools:
            self.tools = ToolCallScanner(*self.fmt.tools)

    def on_inserted(self, uid: int, cached: int, detok: Any, now: float) -> None:
        self.uid, self.cached, self.detok, self.inserted_at = uid, cached, detok, now
        self._replay(self.params.continuation)

    def _replay(self, tokens: tuple[int, ...]) -> None:
        """A resumed answer's tokens, sent already by the instance that was lost: through the
        detokenizer, the channels and the stop strings as if generated, and nothing sent, so
        that what follows continues their text (a stop string or a character split at the seam,
        text the lost runner held back, a tool call begun before it)."""
        for token in tokens:
            self.detok.add_token(token)
            _reasoning, content = self._channels(self.detok.last_segment, final=False)
            self.stops.feed(content)
        self.completion_tokens += len(tokens)

    def on_token(self, out: TokenOut, engine: Engine, now: float) -> list[TokenChunk | Done]:
        """The client's messages for one token; a stop string ends the session here (the loop
        then removes it from the batch), the engine's own finish ("length", EOS) too."""
        if self.done:
            return []  # a token generated in the step before a stop-string removal took effect
        if not self.first_token_at:  # (a resumed answer's replayed tokens were not generated here)
            self.first_token_at = now
            self.prefilled_at = self.prefilled_at or now
        self.last_token_at = now
        self.completion_tokens += 1
        self.accepted += out.accepted
        self.rejected += out.rejected
        eos = out.finish == "stop"
        if not eos:
            self.detok.add_token(out.token)
        if out.finish is not None:
            self.detok.finalize()
        reasoning, content = self._channels(self.detok.last_segment, final=out.finish is not None)
        text, hit = self.stops.feed(content)
        if out.finish is not None and not hit:
            text += self.stops.flush()
        messages: list[TokenChunk | Done] = []
        if reasoning:
            messages.append(self._chunk(out, reasoning, engine, reasoning=True))
        if text or not (hit or reasoning):
            messages.append(self._chunk(out, text, engine, with_logprobs=not reasoning))
        if hit or out.finish is not None:
            if self.tool_calls:
                messages.append(TokenChunk(request_id=self.request_id, seq=self.seq, text="", token=out.token,
                                           tool_calls=tuple(self.tool_calls), index=self.completion_tokens))
                self.seq += 1
            reason = "stop" if hit or out.finish is None else out.finish  # not a hit: the engine's finish
            messages.append(self.finish("tool_calls" if self.tool_calls and reason == "stop" else reason, engine))
        return messages

    def _channels(self, segment: str, final: bool) -> tuple[str, str]:
        """This segment's thinking text and content text; complete tool calls are taken out of
        the content and parsed (one that does not parse stays content, as the model wrote it)."""
        if self.think is None and self.tools is None:  # a plain request: all of it is content
            return "", segment
        pieces = [(segment, False)]
        if self.think is not None:
            pieces = self.think.feed(segment) + (self.think.flush() if final else [])
        reasoning = "".join(t for t, r in pieces if r)
        content = "".join(t for t, r in pieces if not r)
        if self.tools is not None:
            content, bodies = self.tools.feed(content)
            for body in bodies:
                call = self._parse_tool(body)
                if call is None:
                    content += f"{self.tools.start}{body}{self.tools.end}"
                else:
                    self.tool_calls.append(call)
            if final:
                content += self.tools.flush()
        return reasoning, content

    def _parse_tool(self, body: str) -> ToolCall | None:
        parse = self.fmt.parse_tool
        assert parse is not None, "a tool scanner is made only for a format with a parser (__post_init__)"
        try:
            parsed = parse(body, json.loads(self.params.tools))
            name, args = parsed["name"], parsed.get("arguments", {})
        except Exception as exc:  # noqa: BLE001 - a model's malformed call is its text, not an error
            log.info("request %s: a tool call did not parse (%s); kept as text", self.request_id, exc)
            return None
        arguments = args if isinstance(args, str) else json.dumps(args)
        return ToolCall(id=f"call_{self.request_id[:12]}_{len(self.tool_calls)}", name=str(name), arguments=arguments)

    def _chunk(self, out: TokenOut, text: str, engine: Engine, reasoning: bool = False,
               with_logprobs: bool = True) -> TokenChunk:
        extra: dict[str, Any] = {"reasoning": reasoning}
        if self.params.logprobs and with_logprobs:
            logprob, top = engine.logprob_of(out.logprobs, out.token, self.params.top_logprobs)
            extra |= {"logprob": logprob, "token_bytes": engine.piece(out.token).encode(),
                     "top_logprobs": tuple(TopLogprob(token=(p := engine.piece(t)), logprob=lp,
                                                      token_bytes=p.encode()) for t, lp in top)}
        chunk = TokenChunk(request_id=self.request_id, seq=self.seq, text=text, token=out.token,
                           index=self.completion_tokens, **extra)
        self.seq += 1
        return chunk

    def finish(self, reason: str, engine: Engine) -> Done:
        """This request's own figures: prefill of the tokens it did not reuse, over the time from
        joining the batch to its first token; decode over first to last token."""
        self.done = True
        prefill_s = self.first_token_at - self.inserted_at if self.first_token_at else 0.0
        decode_s = self.last_token_at - self.first_token_at
        generated = self.completion_tokens - len(self.params.continuation)
        prefilled = len(self.prompt) + len(self.params.continuation) - self.cached
        return Done(request_id=self.request_id, seq=self.seq, finish_reason=reason,
                    prompt_tokens=len(self.prompt), completion_tokens=self.completion_tokens,
                    prompt_tps=prefilled / prefill_s if prefill_s > 0 else 0.0,
                    generation_tps=(generated - 1) / decode_s if decode_s > 0 else 0.0,
                    peak_memory_bytes=engine.peak_memory(), cached_tokens=min(self.cached, len(self.prompt)),
                    stop_string=self.stops.hit, accepted_prediction_tokens=self.accepted,
                    rejected_prediction_tokens=self.rejected)
