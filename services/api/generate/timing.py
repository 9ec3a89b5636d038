"""How long a stream waits, and what it yields while it waits: the settings the API's streams
share (`api.keepalive_s`, `api.stall_timeout_s`, `api.resume`) and the keep-alive marker every
client shape renders in its own way (an SSE comment, an empty NDJSON piece)."""

from __future__ import annotations

from dataclasses import dataclass

from skulk.node.role_args import ApiArgs


@dataclass(frozen=True, slots=True)
class StreamTiming:
    """`api.keepalive_s`: SSE comment after this much silence (proxies keep the stream open);
    `api.stall_timeout_s`: after the first token, this much silence ends the stream with an
    error (upstream's 120 s; prefill and queueing do not arm it)."""

    keepalive_s: float = 10.0
    stall_s: float = 120.0
    resume_attempts: int = 2  # `api.resume`: a stream whose instance is lost goes on elsewhere (`resume.py`)
    resume_wait_s: float = 30.0

    @classmethod
    def of(cls, api: ApiArgs) -> StreamTiming:
        return cls(keepalive_s=api.keepalive, stall_s=api.stall_timeout, resume_attempts=api.resume_attempts,
                   resume_wait_s=api.resume_wait)


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """Yielded by a stream after `keepalive_s` of silence (the client shape renders it)."""
