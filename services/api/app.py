"""`create_app(...)`: the Falcon application of one gunicorn worker (Falcon "look" style).

Built after the fork, in each worker: it starts the worker's state replica thread and a
gateway whose sockets are per thread.
"""

from __future__ import annotations

from pathlib import Path

import falcon

from skulk.services.api.errors import handle_unexpected, serialize_error
from skulk.services.api.gateway import Gateway, StreamTiming
from skulk.services.api.replica import StateReplica
from skulk.services.api.resources.admin import AdminRestartResource
from skulk.services.api.resources.chat import ChatResource
from skulk.wire.version import skulk_version
from skulk.services.api.resources.cluster import (HealthResource, InstanceResource,
                                                  ModelsResource, NodeDiagnosticsResource,
                                                  NodeIdResource,
                                                  PlaceResource, PreviewsResource, StateResource)



def create_app(home: Path, run_dir: Path, node_id: str, timing: StreamTiming | None = None) -> falcon.App:
    replica = StateReplica(run_dir)
    gateway = Gateway(run_dir, replica, timing or StreamTiming())
    models = home / "models"
    app = falcon.App(cors_enable=True)
    app.set_error_serializer(serialize_error)
    app.add_error_handler(Exception, handle_unexpected)
    app.add_route("/health", HealthResource(replica, skulk_version()))
    app.add_route("/node_id", NodeIdResource(node_id))
    app.add_route("/state", StateResource(replica))
    app.add_route("/v1/diagnostics/node", NodeDiagnosticsResource(replica, node_id, skulk_version()))
    app.add_route("/v1/models", ModelsResource(models))
    app.add_route("/models", ModelsResource(models))
    app.add_route("/v1/chat/completions", ChatResource(gateway, replica, node_id))
    app.add_route("/place_instance", PlaceResource(gateway, replica, models))
    app.add_route("/instance/previews", PreviewsResource(replica, models))
    app.add_route("/instance/{instance_id}", InstanceResource(gateway, replica))
    app.add_route("/admin/restart", AdminRestartResource(gateway, node_id))
    return app
