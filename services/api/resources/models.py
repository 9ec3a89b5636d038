"""`GET /v1/models` and `GET /models`: the models on this node's disk, and the card lookup
placement uses."""

from __future__ import annotations

from pathlib import Path

import falcon

from skulk.services.api.resources.common import http_error
from skulk.services.api.state_json import model_entry
from skulk.wire.models import ModelCard, ModelDirError, card_from_dir, dir_name, scan


class ModelsResource:
    def __init__(self, models_dir: Path) -> None:
        self.models_dir = models_dir

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        cards, _rejected = scan(self.models_dir)
        resp.media = {"object": "list", "data": [model_entry(c) for c in cards.values()]}


def load_card(models_dir: Path, model_id: object) -> ModelCard:
    if not isinstance(model_id, str) or not model_id:
        raise http_error(400, "model_id is required (a string)")
    try:
        return card_from_dir(models_dir / dir_name(model_id))
    except ModelDirError as exc:
        raise http_error(404, f"Model {model_id} is not available on this node: {exc}") from None
