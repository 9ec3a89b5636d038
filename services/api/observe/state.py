"""`GET /state`: the replicated cluster state in upstream's shape."""

from __future__ import annotations

import falcon

from skulk.cluster.replica import StateReplica
from skulk.services.api.http.cluster_replies import state_or_503
from skulk.services.api.observe.state_json import state_json


class StateResource:
    def __init__(self, replica: StateReplica) -> None:
        self.replica = replica

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """`?wait_after_idx=N&timeout=S` (ours, optional): long-poll until the state moves past
        index N or S seconds (at most 30) pass, so tools wait on changes instead of polling."""
        state = state_or_503(self.replica)
        after = req.get_param_as_int("wait_after_idx")
        if after is not None:
            timeout = min(max(req.get_param_as_float("timeout") or 10.0, 0.0), 30.0)
            state = self.replica.wait_change(after, timeout) or state
        resp.media = state_json(state)
