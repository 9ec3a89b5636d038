"""`POST /v1/cancel/{command_id}`: cancel a generation whose stream lives on this node.

Any API thread (or worker) may take the call, not only the one writing the stream: the task in
the replicated state says which runner serves the command, the runner drops it within one step
and ends its stream with a `cancelled` outcome, which the stream's own thread renders and
records. Unknown, finished, or owned by another node's API: 404, as upstream.
"""

from __future__ import annotations

import falcon

from skulk.cluster.replica import StateReplica
from skulk.cluster.state import TaskStatus
from skulk.services.api.http.cluster_replies import state_or_503
from skulk.services.api.http.errors import http_error
from skulk.services.api.http.schema import STRING, Schema, obj
from skulk.services.api.links.runner_link import RunnerLink

NOT_FOUND = "Command not found or already completed"
CANCELLED: Schema = obj({"message": STRING, "command_id": STRING})


class CancelResource:
    def __init__(self, runners: RunnerLink, replica: StateReplica, node_id: str) -> None:
        self.runners = runners
        self.replica = replica
        self.node_id = node_id

    def on_post(self, req: falcon.Request, resp: falcon.Response, command_id: str) -> None:
        state = state_or_503(self.replica)
        task = next((t for t in state.tasks.values() if t.command_id == command_id), None)
        if task is None or task.owner_node != self.node_id or task.status != TaskStatus.RUNNING:
            raise http_error(404, NOT_FOUND)
        inst = state.instances.get(task.instance_id)
        rank0 = next((rid for rid, shard in inst.runner_to_shard.items() if shard.device_rank == 0),
                     None) if inst else None
        status = state.runners.get(rank0) if rank0 else None
        if status is None or not status.endpoint:
            raise http_error(404, NOT_FOUND)
        self.runners.cancel_once(status.endpoint, command_id)
        resp.media = {"message": "Command cancelled.", "command_id": command_id}
