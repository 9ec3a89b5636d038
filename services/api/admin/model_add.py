"""`POST /models/add`: import a model from a path on this node into its models dir.

`{"path": "/abs/file.gguf" | "/abs/model-dir", "model_id"?: "org/name"}`: a GGUF file (or a
directory holding one) is converted as `skulk model add` does (`node/gguf_import.py`), an MLX
model directory is copied; either is written beside the models dir and renamed into place, so a
failure leaves nothing. The store role finds it at its next scan (2 s) and the cluster's catalog
lists it; the answer is upstream's model entry. Upstream's route takes only a hub id and adds a
card: without a hub at run time, a path on the node is what an operator has (hub models go
through the store's download route)."""

from __future__ import annotations

from pathlib import Path

import falcon

from skulk.node.model_cards import card_from_dir
from skulk.node.model_import import AddFailure, FetchError, add_gguf, add_local_dir, gguf_file
from skulk.services.api.http.errors import http_error
from skulk.services.api.http.request_body import json_body
from skulk.services.api.http.schema import STRING, TEXT, Schema, obj
from skulk.services.api.observe.state_json import model_entry

STATUS = {AddFailure.INVALID: 400, AddFailure.EXISTS: 409, AddFailure.WRITE: 507, AddFailure.FETCH: 502}


class ModelAddResource:
    def __init__(self, models_dir: Path) -> None:
        self.models_dir = models_dir

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = json_body(req)
        if not isinstance(body, dict):
            raise http_error(400, "request body must be a JSON object")
        path, model_id = body.get("path"), body.get("model_id")
        if not isinstance(path, str) or not path:
            raise http_error(400, "Failed to add model: `path` is required: a .gguf file, or a model directory, "
                                  "on this node (models from the hub: POST /store/models/{org}/{name}/download)")
        if model_id is not None and not isinstance(model_id, str):
            raise http_error(400, "Failed to add model: `model_id` must be a string of the form org/name")
        source = Path(path)
        if not source.is_absolute():
            raise http_error(400, f"Failed to add model: {path!r} is not an absolute path on this node")
        if not source.exists():
            raise http_error(404, f"Failed to add model: {path} does not exist on this node")
        try:
            gguf = gguf_file(source)
            if gguf is not None:
                result = add_gguf(gguf, self.models_dir, model_id=model_id or None)
            elif source.is_dir():
                result = add_local_dir(source, self.models_dir, model_id=model_id or None)
            else:
                raise http_error(400, f"Failed to add model: {path} is neither a .gguf file nor a model directory")
        except FetchError as exc:
            raise http_error(STATUS[exc.reason], f"Failed to add model: {exc}") from None
        except OSError as exc:  # the source unreadable (permissions), the destination unwritable
            raise http_error(400, f"Failed to add model: {path}: {exc.strerror or exc}") from None
        resp.media = model_entry(card_from_dir(result.directory))


ADD_REQUEST: Schema = obj({"path": TEXT}, {"model_id": STRING})
