"""`GET`/`DELETE /instance/{instance_id}`."""

from __future__ import annotations

import uuid

import falcon

from skulk.cluster.replica import StateReplica
from skulk.services.api.http.cluster_replies import master_accepts, state_or_503
from skulk.services.api.http.errors import http_error
from skulk.services.api.http.schema import STRING, Schema, obj
from skulk.services.api.links.master_client import MasterClient
from skulk.services.api.observe.state_json import instance_json
from skulk.wire.commands import DeleteInstance


class InstanceResource:
    def __init__(self, master: MasterClient, replica: StateReplica) -> None:
        self.master = master
        self.replica = replica

    def on_get(self, req: falcon.Request, resp: falcon.Response, instance_id: str) -> None:
        inst = state_or_503(self.replica).instances.get(instance_id)
        if inst is None:
            raise http_error(404, "Instance not found")
        resp.media = instance_json(inst)

    def on_delete(self, req: falcon.Request, resp: falcon.Response, instance_id: str) -> None:
        cmd = DeleteInstance(command_id=uuid.uuid4().hex, instance_id=instance_id)
        master_accepts(self.master, cmd)
        resp.media = {"message": "Command received.", "command_id": cmd.command_id,
                      "instance_id": instance_id}


DELETING: Schema = obj({"message": STRING, "command_id": STRING, "instance_id": STRING})
