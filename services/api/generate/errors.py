"""What the generation path refuses before any output, and the HTTP status of every failure.

The adapters choose their error shapes on these typed values (`GenerationError.reason`,
`Failed.reason`), never on the message text."""

from __future__ import annotations

from dataclasses import replace

from skulk.cluster.state import TaskParams
from skulk.wire.inference import FailReason

FAIL_STATUS: dict[str, int] = {FailReason.BUSY: 503, FailReason.CONTEXT_LENGTH_EXCEEDED: 400,
                               FailReason.BAD_REQUEST: 400, FailReason.SESSION_CHANGED: 503,
                               FailReason.CANCELLED: 499, FailReason.PREEMPTED: 503}
"""The HTTP status of a failure, by its reason (anything else: 500, in the error envelope)."""


def fail_status(reason: str) -> int:
    return FAIL_STATUS.get(reason, 500)


class GenerationError(Exception):
    """The request is refused before any output: `status` for HTTP, `reason` for the adapter
    (a FailReason, a RejectReason, or "invalid_request" / "not_found" from the checks here)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


def context_checked(params: TaskParams, context_limit: int, default_max: int = 4096) -> TaskParams:
    """Fill the default output budget (`api.max_output_tokens`), or refuse a max_tokens the
    model cannot hold."""
    if params.max_tokens == 0:
        budget = min(default_max, context_limit) if context_limit > 0 else default_max
        return replace(params, max_tokens=max(1, budget))
    if context_limit > 0 and params.max_tokens > context_limit:
        raise GenerationError(400, FailReason.CONTEXT_LENGTH_EXCEEDED,
                              f"context_length_exceeded: max_tokens ({params.max_tokens}) cannot fit "
                              f"within this model's usable context limit of {context_limit} tokens; "
                              "lower max_tokens or place the model with more memory")
    return params
