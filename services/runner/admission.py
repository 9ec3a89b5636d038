"""What a generate request must satisfy before it may join a batch (pure).

The API checks a client's values first; these checks are the runner's own, for values that
would otherwise fail only inside `engine.insert`, where one bad request fails every request
joining the batch in the same step (found by fuzzing the runner's port)."""

from __future__ import annotations

import math

from skulk.cluster.state import TaskParams
from skulk.wire.inference import Generate

MAX_ID_CHARS = 256
"""Request and task ids are the API's uuids; a longer one is refused unlogged (a stranger's
megabyte id must not become a megabyte log line per frame)."""


def grammar_error(grammar: str) -> str:
    """Why llguidance would refuse `grammar` ("" when it compiles)."""
    import llguidance

    return str(llguidance.LLMatcher.validate_grammar(grammar))


def ids_error(msg: Generate) -> str:
    """Why a request's ids are unusable ("" when they are fine)."""
    if len(msg.request_id) > MAX_ID_CHARS or len(msg.task_id) > MAX_ID_CHARS:
        return f"request and task ids must be at most {MAX_ID_CHARS} characters"
    return ""


def request_error(params: TaskParams) -> str:
    """The first value of `params` the engine cannot take ("" when there is none)."""
    if params.max_tokens < 1:
        return f"max_tokens must be at least 1, got {params.max_tokens}"
    for name, top in (("temperature", math.inf), ("top_p", 1.0), ("min_p", 1.0)):
        value = getattr(params, name)
        if value is not None and not (math.isfinite(value) and 0 <= value <= top):
            return (f"{name} must be a finite number >= 0, got {value}" if top == math.inf else
                    f"{name} must be between 0 and 1, got {value}")  # mlx-lm's sampler raises mid-step
    if params.top_k is not None and params.top_k < 0:
        return f"top_k must be >= 0, got {params.top_k}"
    if params.top_logprobs < 0:
        return f"top_logprobs must be >= 0, got {params.top_logprobs}"
    if params.grammar and (why := grammar_error(params.grammar)):
        return f"response_format: {why}"
    return ""
