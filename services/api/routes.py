"""Every route the API serves, declared once: `app.py` builds the Falcon app from this table and
`openapi.py` the OpenAPI document (`GET /api/openapi.json`), so neither can list a route the
other lacks. Request and response schemas are referenced from the modules that parse and
render them. To add a route, append a `Route` (its resource's responders must match its ops).
"""

from __future__ import annotations

from collections.abc import Callable

from skulk.services.api import openai_format as fmt
from skulk.services.api.chat_request import CHAT_REQUEST
from skulk.services.api.declare import NDJSON, SSE, Deps, Op, Param, Route
from skulk.services.api.openapi import OPENAPI, OpenApiResource
from skulk.services.api.embedding_request import EMBEDDING_LIST, EMBEDDING_REQUEST
from skulk.services.api.resources import (admin, anthropic, cancel, completions, config, diagnostics, events, health,
                                           instance, models, node_id, ollama, place, previews, responses, state,
                                           store, store_proxy)
from skulk.services.api.resources.embeddings import EmbeddingsResource
from skulk.services.api.resources.chat import ChatResource
from skulk.services.api.schema import INTEGER, NUMBER, STRING, TEXT, Schema, array
from skulk.services.api.state_json import INSTANCE, MODEL_LIST, STATE

GENERATION_ERRORS = (400, 404, 499, 500, 503)
"""A generation's refusals and failures: bad request or context too long (400), no instance of
the model (404), cancelled (499), engine failure (500), busy or no master (503)."""


def _store(d: Deps) -> store_proxy.StoreClient:
    return store_proxy.StoreClient(d.store, d.replica, d.listen)


def _catalog(d: Deps) -> models.Catalog:
    return models.Catalog(d.replica, d.node_id, d.models)


def ollama_paths(name: str, aliases: tuple[str, ...] = ("",)) -> tuple[str, ...]:
    """Upstream serves Ollama's API under both `/ollama/api` and `/api` (some names under
    `/api/api` and `/api/v1` too, where clients have been seen to call them)."""
    return tuple(f"{base}{alias}/{name}" for base in ("/ollama/api", "/api") for alias in aliases)


def ollama_route(name: str, make: Callable[[Deps], object], ops: dict[str, Op],
                 aliases: tuple[str, ...] = ("",)) -> Route:
    first, *rest = ollama_paths(name, aliases)
    return Route(first, make, ops, "ollama", aliases=tuple(rest))


def _generation_op(summary: str, body: Schema, ok: Schema, stream: str = SSE) -> Op:
    return Op(summary, ok=ok, body=body, errors=GENERATION_ERRORS, stream=stream)


ROUTES: tuple[Route, ...] = (
    # ---- inference (OpenAI, Anthropic, Ollama shapes; one generation path) -------------------------
    Route("/v1/chat/completions", lambda d: ChatResource(d.generation), {
        "POST": _generation_op("OpenAI chat completion (streams with `stream: true`)",
                               CHAT_REQUEST, fmt.CHAT_COMPLETION)}, "openai"),
    Route("/bench/chat/completions", lambda d: ChatResource(d.generation, bench=True), {
        "POST": Op("A whole chat completion with its generation stats (never streams)",
                   ok=fmt.BENCH_COMPLETION, body=CHAT_REQUEST, errors=GENERATION_ERRORS)}, "openai"),
    Route("/v1/completions", lambda d: completions.CompletionsResource(d.generation), {
        "POST": _generation_op("OpenAI legacy completion of a raw prompt (no chat template)",
                               completions.COMPLETION_REQUEST, completions.TEXT_COMPLETION)}, "openai"),
    Route("/v1/responses", lambda d: responses.ResponsesResource(d.generation), {
        "POST": _generation_op("OpenAI Responses (text in, one message out)",
                               responses.RESPONSE_REQUEST, responses.RESPONSE)}, "openai"),
    Route("/v1/messages", lambda d: anthropic.MessagesResource(d.generation), {
        "POST": _generation_op("Anthropic Messages", anthropic.MESSAGES_REQUEST, anthropic.MESSAGE)},
          "anthropic"),
    Route("/v1/embeddings", lambda d: EmbeddingsResource(d.gateway, d.replica, d.node_id), {
        "POST": Op("OpenAI embeddings from an embedding model (float or base64)", ok=EMBEDDING_LIST,
                   body=EMBEDDING_REQUEST, errors=(400, 404, 500, 503))}, "openai"),
    Route("/v1/cancel/{command_id}", lambda d: cancel.CancelResource(d.gateway, d.replica, d.node_id), {
        "POST": Op("Cancel a generation streaming from this node", ok=cancel.CANCELLED, errors=(404, 503))},
          "openai"),
    ollama_route("chat", lambda d: ollama.OllamaGenerateResource(d.generation, "chat"), {
        "POST": _generation_op("Ollama chat (streams NDJSON unless `stream: false`)",
                               ollama.CHAT_REQUEST, ollama.CHAT_RESPONSE, NDJSON)}, ("", "/api", "/v1")),
    ollama_route("generate", lambda d: ollama.OllamaGenerateResource(d.generation, "generate"), {
        "POST": _generation_op("Ollama generate (streams NDJSON unless `stream: false`)",
                               ollama.GENERATE_REQUEST, ollama.GENERATE_RESPONSE, NDJSON)}),
    ollama_route("tags", lambda d: ollama.OllamaTagsResource(_catalog(d)), {
        "GET": Op("The models on this node's disk", ok=ollama.TAGS)}, ("", "/api", "/v1")),
    ollama_route("show", lambda d: ollama.OllamaShowResource(_catalog(d)), {
        "POST": Op("One model's details", ok=ollama.SHOW, body=ollama.SHOW_REQUEST, errors=(400, 404))}),
    ollama_route("ps", lambda d: ollama.OllamaPsResource(d.replica, _catalog(d)), {
        "GET": Op("The models with an instance in the cluster", ok=ollama.PS)}),
    ollama_route("version", lambda d: ollama.OllamaVersionResource(d.version), {
        "GET": Op("This node's version", ok=ollama.VERSION), "HEAD": Op("Liveness")}),
    Route("/ollama", lambda d: ollama.OllamaRootResource(), {
        "GET": Op("Says \"Ollama is running\"", ok=STRING, media="text/plain"), "HEAD": Op("Liveness")},
          "ollama"),
    # ---- models, placement, instances --------------------------------------------------------------
    Route("/v1/models", lambda d: models.ModelsResource(_catalog(d)), {
        "GET": Op("The models on this node's disk", ok=MODEL_LIST)}, "cluster", aliases=("/models",)),
    Route("/place_instance", lambda d: place.PlaceResource(d.gateway, d.replica, _catalog(d)), {
        "POST": Op("Place an instance of a model on the cluster", ok=place.PLACED, body=place.PLACE_REQUEST,
                   errors=(400, 404, 503))}, "cluster"),
    Route("/instance/previews", lambda d: previews.PreviewsResource(d.replica, _catalog(d)), {
        "GET": Op("Every placement the cluster could make for a model, and why not where it cannot",
                  ok=previews.PREVIEWS, errors=(400, 404, 503),
                  query=(Param("model_id", TEXT, "the model", required=True),
                         Param("excluded_node_ids", array(STRING), "nodes to leave out (repeatable)")))},
          "cluster"),
    Route("/instance/{instance_id}", lambda d: instance.InstanceResource(d.gateway, d.replica), {
        "GET": Op("One instance (tagged by its kind)", ok=INSTANCE, errors=(404, 503)),
        "DELETE": Op("Delete an instance", ok=instance.DELETING, errors=(404, 503))}, "cluster"),
    # ---- state, identity, health -------------------------------------------------------------------
    Route("/state", lambda d: state.StateResource(d.replica), {
        "GET": Op("The replicated cluster state (upstream's camelCase shape)", ok=STATE, errors=(503,),
                  query=(Param("wait_after_idx", INTEGER, "long-poll until the state moves past this index"),
                         Param("timeout", NUMBER, "the long-poll's limit in seconds (default 10, at most 30)")))},
          "cluster"),
    Route("/node_id", lambda d: node_id.NodeIdResource(d.node_id), {
        "GET": Op("This node's id (a JSON string)", ok=node_id.NODE_ID)}, "cluster"),
    Route("/health", lambda d: health.HealthResource(d.replica, d.version), {
        "GET": Op("Idle or busy, and the version", ok=health.HEALTH)}, "cluster"),
    Route("/v1/diagnostics/node", lambda d: diagnostics.NodeDiagnosticsResource(d.replica, d.node_id, d.version), {
        "GET": Op("Who this node is and whom it follows", ok=diagnostics.DIAGNOSTICS)}, "cluster"),
    # ---- configuration and admin -------------------------------------------------------------------
    Route("/config", lambda d: config.ConfigResource(d.gateway, d.replica, d.node_id, d.config_file), {
        "GET": Op("This node's skulk.yaml, secrets stripped", ok=config.CONFIG, errors=(500,)),
        "PUT": Op("Validate, save and share the cluster's configuration", ok=config.CONFIG_SAVED,
                  body=config.CONFIG_REQUEST, errors=(400, 422, 503))}, "admin"),
    Route("/events", lambda d: events.EventsResource(d.home), {
        "GET": Op("This node's event log, tagged events oldest first (the newest `limit`)", ok=events.EVENTS,
                  errors=(400,), query=(Param("limit", INTEGER, "how many of the newest events (1000)"),))},
          "cluster"),
    Route("/store/storage", lambda d: store.StorageResource(d.replica, d.node_id, d.home, d.staging_root), {
        "GET": Op("This node's staged models, event log and disk (local only: ask each node)",
                  ok=store.STORAGE)}, "store"),
    Route("/store/purge-staging", lambda d: store.PurgeResource(d.gateway), {
        "POST": Op("Remove staged copies nobody uses, on every node (`{}`: all; `modelId`: one)",
                   ok=store.PURGED, body=store.PURGE_REQUEST, errors=(400, 422, 503))}, "store"),
    Route("/store/health", lambda d: store_proxy.StoreHealthResource(_store(d)), {
        "GET": Op("The store host's disk (503: no store, or unreachable)", ok=store_proxy.STORE_HEALTH,
                  errors=(503,))}, "store"),
    Route("/store/registry", lambda d: store_proxy.StoreRegistryResource(_store(d)), {
        "GET": Op("The models in the store", ok=store_proxy.STORE_REGISTRY, errors=(503,))}, "store"),
    Route("/store/models/{org}/{name}", lambda d: store_proxy.StoreModelResource(_store(d)), {
        "DELETE": Op("Delete a model from the store", ok=store_proxy.STORE_DELETED, errors=(400, 404, 503))},
          "store"),
    Route("/store/models/{org}/{name}/download", lambda d: store_proxy.StoreModelResource(_store(d)), {
        "POST": Op("Fetch a model from Hugging Face into the store", ok=store_proxy.DOWNLOAD,
                   errors=(400, 409, 503))}, "store", suffix="download"),
    Route("/store/models/{org}/{name}/download/status", lambda d: store_proxy.StoreModelResource(_store(d)), {
        "GET": Op("A store download's progress", ok=store_proxy.DOWNLOAD, errors=(400, 404, 503))},
          "store", suffix="status"),
    Route("/admin/restart", lambda d: admin.AdminRestartResource(d.gateway, d.node_id), {
        "POST": Op("Replace a node's process in place (same PID)", ok=admin.RESTARTING, errors=(404, 503),
                   query=(Param("node_id", STRING, "the node to restart (default: this one)"),),
                   other={409: admin.RESTART_ALREADY_PENDING})}, "admin"),
    Route("/api/openapi.json", lambda d: OpenApiResource(d.routes, d.version), {
        "GET": Op("This document", ok=OPENAPI)}, "meta"),
)
