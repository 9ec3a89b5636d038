"""One request's life on rank 0: its place in the wait queue or the batch, its text (streaming
detokenizer and stop strings), its logprobs and its own measured stats.

`Session.on_token` turns the engine's tokens into the client's messages; the last message of
a session is its `Done`. Times are `time.monotonic()` values passed in by the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skulk.services.runner.engine import Engine, TokenOut
from skulk.services.runner.stops import StopMatcher
from skulk.wire.inference import Done, TokenChunk, TopLogprob
from skulk.wire.state import TaskParams


@dataclass
class Session:
    request_id: str
    envelope: list[bytes]
    params: TaskParams
    prompt: list[int]
    seed: int
    admitted_at: float
    uid: int = -1  # the engine's uid once inserted into the batch
    inserted_at: float = 0.0
    prefilled_at: float = 0.0
    first_token_at: float = 0.0
    last_token_at: float = 0.0
    cached: int = 0
    seq: int = 0
    completion_tokens: int = 0
    done: bool = False
    stops: StopMatcher = field(init=False)
    detok: Any = None

    def __post_init__(self) -> None:
        self.stops = StopMatcher(self.params.stop)

    def on_inserted(self, uid: int, cached: int, detok: Any, now: float) -> None:
        self.uid, self.cached, self.detok, self.inserted_at = uid, cached, detok, now

    def on_token(self, out: TokenOut, engine: Engine, now: float) -> list[TokenChunk | Done]:
        """The client's messages for one token; a stop string ends the session here (the loop
        then removes it from the batch), the engine's own finish ("length", EOS) too."""
        if self.done:
            return []  # a token generated in the step before a stop-string removal took effect
        if not self.completion_tokens:
            self.first_token_at = now
            self.prefilled_at = self.prefilled_at or now
        self.last_token_at = now
        self.completion_tokens += 1
        eos = out.finish == "stop"
        if not eos:
            self.detok.add_token(out.token)
        if out.finish is not None:
            self.detok.finalize()
        text, hit = self.stops.feed(self.detok.last_segment)
        if out.finish is not None and not hit:
            text += self.stops.flush()
        messages: list[TokenChunk | Done] = []
        if text or not hit:
            messages.append(self._chunk(out, text, engine))
        if hit:
            messages.append(self.finish("stop", engine))
        elif out.finish is not None:
            messages.append(self.finish(out.finish, engine))
        return messages

    def _chunk(self, out: TokenOut, text: str, engine: Engine) -> TokenChunk:
        extra: dict[str, Any] = {}
        if self.params.logprobs:
            logprob, top = engine.logprob_of(out.logprobs, out.token, self.params.top_logprobs)
            extra = {"logprob": logprob, "token_bytes": engine.piece(out.token).encode(),
                     "top_logprobs": tuple(TopLogprob(token=(p := engine.piece(t)), logprob=lp,
                                                      token_bytes=p.encode()) for t, lp in top)}
        chunk = TokenChunk(request_id=self.request_id, seq=self.seq, text=text, token=out.token, **extra)
        self.seq += 1
        return chunk

    def finish(self, reason: str, engine: Engine) -> Done:
        """This request's own figures: prefill of the tokens it did not reuse, over the time from
        joining the batch to its first token; decode over first to last token."""
        self.done = True
        prefill_s = self.first_token_at - self.inserted_at if self.first_token_at else 0.0
        decode_s = self.last_token_at - self.first_token_at
        prefilled = len(self.prompt) - self.cached
        return Done(request_id=self.request_id, seq=self.seq, finish_reason=reason,
                    prompt_tokens=len(self.prompt), completion_tokens=self.completion_tokens,
                    prompt_tps=prefilled / prefill_s if prefill_s > 0 else 0.0,
                    generation_tps=(self.completion_tokens - 1) / decode_s if decode_s > 0 else 0.0,
                    peak_memory_bytes=engine.peak_memory(), cached_tokens=self.cached)
