"""Upstream's store routes on every node's API, answered by the store host's HTTP server:
`GET /store/health`, `GET /store/registry`, `DELETE /store/models/{model_id}`,
`POST /store/models/{model_id}/download` and `GET .../download/status` (fetch from Hugging Face
into the store). 503 `Store not configured` without a `model_store`, `Store unreachable` when
the store host does not answer within a few seconds."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import falcon

from skulk.cluster.replica import StateReplica
from skulk.node.model_store import ModelStoreConfig
from skulk.node.staged import store_url
from skulk.services.api.http.errors import http_error
from skulk.services.api.http.schema import ANY_OBJECT, INTEGER, STRING, Schema, obj
from skulk.wire import curve
from skulk.wire.models import ModelDirError, dir_name

TIMEOUT_S = 5.0


class StoreClient:
    def __init__(self, store: ModelStoreConfig | None, replica: StateReplica, listen: str) -> None:
        self.store, self.replica, self.listen = store, replica, listen

    def call(self, method: str, path: str) -> tuple[int, Any]:
        if self.store is None:
            raise http_error(503, "Store not configured")
        store = self.store
        url = store_url(store.store_host, store.store_http_host, store.store_port, self.replica.get(timeout=0),
                        self.listen) + path
        req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None,
                                     headers=curve.store_headers())
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # noqa: S310 - the store's URL
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            text = exc.read()
            try:
                body = json.loads(text or b"{}")
            except ValueError:
                body = None
            return exc.code, body if isinstance(body, dict) else {"error": text.decode(errors="replace")[:200]}
        except (OSError, ValueError) as exc:
            raise http_error(503, f"Store unreachable ({url}): {exc}") from None


def _model_path(model_id: str) -> str:
    try:
        return dir_name(model_id)
    except ModelDirError as exc:
        raise http_error(400, str(exc)) from None


def _answer(resp: falcon.Response, status: int, body: Any, not_found: str = "") -> None:
    if status >= 400:
        raise http_error(status, not_found if status == 404 and not_found else str(body.get("error", body)))
    resp.status = falcon.code_to_http_status(status)
    resp.media = body


class StoreHealthResource:
    def __init__(self, client: StoreClient) -> None:
        self.client = client

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        status, body = self.client.call("GET", "/health")
        _answer(resp, status, {"storePath": body.get("store_path"), "freeBytes": body.get("free_bytes"),
                               "totalBytes": body.get("total_bytes"), "usedBytes": body.get("used_bytes")}
                if status < 400 else body)


class StoreRegistryResource:
    def __init__(self, client: StoreClient) -> None:
        self.client = client

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        _answer(resp, *self.client.call("GET", "/registry"))


class StoreModelResource:
    """`DELETE /store/models/{model_id}` (the id has a slash: two path segments)."""

    def __init__(self, client: StoreClient) -> None:
        self.client = client

    def on_delete(self, req: falcon.Request, resp: falcon.Response, org: str, name: str) -> None:
        model_id = f"{org}/{name}"
        _answer(resp, *self.client.call("DELETE", f"/models/{_model_path(model_id)}"),
                not_found=f"Model {model_id} not in store")

    def on_post_download(self, req: falcon.Request, resp: falcon.Response, org: str, name: str) -> None:
        _answer(resp, *self.client.call("POST", f"/models/{_model_path(f'{org}/{name}')}/download"))

    def on_get_status(self, req: falcon.Request, resp: falcon.Response, org: str, name: str) -> None:
        model_id = f"{org}/{name}"
        _answer(resp, *self.client.call("GET", f"/models/{_model_path(model_id)}/download/status"),
                not_found=f"No download of {model_id}")


STORE_HEALTH: Schema = obj({"storePath": STRING, "freeBytes": INTEGER, "totalBytes": INTEGER,
                            "usedBytes": INTEGER})
STORE_REGISTRY: Schema = obj({"entries": {"type": "array", "items": ANY_OBJECT}})
STORE_DELETED: Schema = obj({"modelId": STRING, "deleted": {"type": "boolean"}})
DOWNLOAD: Schema = obj({"modelId": STRING, "status": STRING}, {"downloadedBytes": INTEGER,
                                                                 "totalBytes": INTEGER, "error": {}})
