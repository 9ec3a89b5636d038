"""Every route the API serves, declared once: `app.py` builds the Falcon app from this table and
`openapi.py` the OpenAPI document (`GET /api/openapi.json`), so neither can list a route the
other lacks. Request and response schemas are referenced from the modules that parse and
render them. To add a route, append a `Route` (its resource's responders must match its ops).

Who may call a route is declared here too (`scope=`, `services/api/http/auth.py`): a route that says
nothing is admin. Inference: the generation routes of every client shape, their cancel, the
model listings, `/node_id` and this document. Public: `/health` and the dashboard's own files
(the page is public; every call it makes is scoped). Admin: everything else, reads included
(`/state` and `/events` hold other clients' requests, diagnostics and traces their tasks).
"""

from __future__ import annotations

from collections.abc import Callable

from skulk.node.api_keys import Scope
from skulk.services.api.admin import (
    cancel,
    clusters,
    config,
    instance,
    model_add,
    place,
    previews,
    store,
    store_proxy,
)
from skulk.services.api.admin import restart as admin
from skulk.services.api.admin.tracing import TRACING, TracingResource
from skulk.services.api.dialects import anthropic, completions, models, ollama, responses
from skulk.services.api.dialects.embeddings import EMBEDDING_LIST, EMBEDDING_REQUEST, EmbeddingsResource
from skulk.services.api.dialects.openai_chat import BENCH_COMPLETION, CHAT_COMPLETION, CHAT_REQUEST, ChatResource
from skulk.services.api.generate.generation import Generation
from skulk.services.api.generate.metering import ApiShape
from skulk.services.api.http.declare import NDJSON, SSE, Deps, Op, Param, Route
from skulk.services.api.http.openapi import OPENAPI, OpenApiResource
from skulk.services.api.http.schema import INTEGER, NUMBER, STRING, TEXT, Schema, array
from skulk.services.api.observe import diagnostics, events, health, node_id, state, traces, traces_cluster
from skulk.services.api.observe import diagnostics_fanout as fanout
from skulk.services.api.observe.dashboard import (
    ASSET_SCHEMA,
    PAGE_SCHEMA,
    SPA_PATHS,
    DashboardAssetResource,
    DashboardPageResource,
)
from skulk.services.api.observe.diagnostics_cluster import CLUSTER, TIMELINE
from skulk.services.api.observe.diagnostics_node import NODE_DIAGNOSTICS, NodeFacts
from skulk.services.api.observe.metrics import METRICS, MetricsResource
from skulk.services.api.observe.state_json import INSTANCE, MODEL_ENTRY, MODEL_LIST, STATE

INFERENCE, PUBLIC = Scope.INFERENCE, Scope.PUBLIC

GENERATION_ERRORS = (400, 404, 499, 500, 503)
"""A generation's refusals and failures: bad request or context too long (400), no instance of
the model (404), cancelled (499), engine failure (500), busy or no master (503)."""


def _store(d: Deps) -> store_proxy.StoreClient:
    return store_proxy.StoreClient(d.store, d.replica, d.listen)


def _traces(d: Deps) -> traces_cluster.ClusterTraces:
    return traces_cluster.ClusterTraces(d.home, d.replica, d.node_id)


def _gen(d: Deps, api: ApiShape) -> Generation:
    """The generation path for one client shape (the `api` label of its metrics)."""
    return d.generation.shaped(api)


def _diagnostics(d: Deps) -> diagnostics.NodeDiagnosticsSource:
    facts = NodeFacts(d.node_id, d.version, d.namespace, d.config_file, d.log_json)
    return diagnostics.NodeDiagnosticsSource(facts, d.replica, d.runner_view, d.run_dir, d.home)


def _fan(d: Deps) -> fanout.ClusterFanOut:
    return fanout.ClusterFanOut(_diagnostics(d), d.node_id)


ENTRIES = Param("entries", INTEGER, "how many of each runner's newest flight-recorder entries (default all, 256)")


def _catalog(d: Deps) -> models.Catalog:
    return models.Catalog(d.replica, d.node_id, d.models)


def ollama_paths(name: str, aliases: tuple[str, ...] = ("",)) -> tuple[str, ...]:
    """Upstream serves Ollama's API under both `/ollama/api` and `/api` (some names under
    `/api/api` and `/api/v1` too, where clients have been seen to call them)."""
    return tuple(f"{base}{alias}/{name}" for base in ("/ollama/api", "/api") for alias in aliases)


def ollama_route(name: str, make: Callable[[Deps], object], ops: dict[str, Op],
                 aliases: tuple[str, ...] = ("",)) -> Route:
    first, *rest = ollama_paths(name, aliases)
    return Route(first, make, ops, "ollama", aliases=tuple(rest), scope=INFERENCE)


def _generation_op(summary: str, body: Schema, ok: Schema, stream: str = SSE) -> Op:
    return Op(summary, ok=ok, body=body, errors=GENERATION_ERRORS, stream=stream, generation=True)


ROUTES: tuple[Route, ...] = (
    # ---- inference (OpenAI, Anthropic, Ollama shapes; one generation path) -------------------------
    Route("/v1/chat/completions", lambda d: ChatResource(_gen(d, ApiShape.OPENAI_CHAT)), {
        "POST": _generation_op("OpenAI chat completion (streams with `stream: true`)",
                               CHAT_REQUEST, CHAT_COMPLETION)}, "openai", scope=INFERENCE),
    Route("/bench/chat/completions", lambda d: ChatResource(_gen(d, ApiShape.BENCH), bench=True), {
        "POST": Op("A whole chat completion with its generation stats (never streams)",
                   ok=BENCH_COMPLETION, body=CHAT_REQUEST, errors=GENERATION_ERRORS, generation=True)},
          "openai", scope=INFERENCE),
    Route("/v1/completions", lambda d: completions.CompletionsResource(_gen(d, ApiShape.OPENAI_COMPLETIONS)), {
        "POST": _generation_op("OpenAI legacy completion of a raw prompt (no chat template)",
                               completions.COMPLETION_REQUEST, completions.TEXT_COMPLETION)}, "openai",
          scope=INFERENCE),
    Route("/v1/responses", lambda d: responses.ResponsesResource(_gen(d, ApiShape.OPENAI_RESPONSES)), {
        "POST": _generation_op("OpenAI Responses (text in, one message out)",
                               responses.RESPONSE_REQUEST, responses.RESPONSE)}, "openai", scope=INFERENCE),
    Route("/v1/messages", lambda d: anthropic.MessagesResource(_gen(d, ApiShape.ANTHROPIC_MESSAGES)), {
        "POST": _generation_op("Anthropic Messages", anthropic.MESSAGES_REQUEST, anthropic.MESSAGE)},
          "anthropic", scope=INFERENCE),
    Route("/v1/embeddings", lambda d: EmbeddingsResource(d.master, d.runners, d.replica, d.node_id), {
        "POST": Op("OpenAI embeddings from an embedding model (float or base64)", ok=EMBEDDING_LIST,
                   body=EMBEDDING_REQUEST, errors=(400, 404, 500, 503), generation=True)}, "openai",
          scope=INFERENCE),
    Route("/v1/cancel/{command_id}", lambda d: cancel.CancelResource(d.runners, d.replica, d.node_id), {
        "POST": Op("Cancel a generation streaming from this node", ok=cancel.CANCELLED, errors=(404, 503))},
          "openai", scope=INFERENCE),  # the command id (random, told only to its client) is the capability
    ollama_route("chat", lambda d: ollama.OllamaGenerateResource(_gen(d, ApiShape.OLLAMA_CHAT), "chat"), {
        "POST": _generation_op("Ollama chat (streams NDJSON unless `stream: false`)",
                               ollama.CHAT_REQUEST, ollama.CHAT_RESPONSE, NDJSON)}, ("", "/api", "/v1")),
    ollama_route("generate", lambda d: ollama.OllamaGenerateResource(_gen(d, ApiShape.OLLAMA_GENERATE), "generate"), {
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
          "ollama", scope=INFERENCE),
    # ---- models, placement, instances --------------------------------------------------------------
    Route("/v1/models", lambda d: models.ModelsResource(_catalog(d)), {
        "GET": Op("The models on this node's disk", ok=MODEL_LIST)}, "cluster", aliases=("/models",),
          scope=INFERENCE),
    Route("/models/add", lambda d: model_add.ModelAddResource(d.models), {
        "POST": Op("Import a model from a path on this node (a .gguf file or a model directory) into its "
                   "models dir", ok=MODEL_ENTRY, body=model_add.ADD_REQUEST, errors=(400, 404, 409, 507))}, "cluster"),
    Route("/place_instance", lambda d: place.PlaceResource(d.master, d.replica, _catalog(d)), {
        "POST": Op("Place an instance of a model on the cluster", ok=place.PLACED, body=place.PLACE_REQUEST,
                   errors=(400, 404, 503))}, "cluster"),
    Route("/instance/previews", lambda d: previews.PreviewsResource(d.replica, _catalog(d)), {
        "GET": Op("Every placement the cluster could make for a model, and why not where it cannot",
                  ok=previews.PREVIEWS, errors=(400, 404, 503),
                  query=(Param("model_id", TEXT, "the model", required=True),
                         Param("excluded_node_ids", array(STRING), "nodes to leave out (repeatable)")))},
          "cluster"),
    Route("/instance/{instance_id}", lambda d: instance.InstanceResource(d.master, d.replica), {
        "GET": Op("One instance (tagged by its kind)", ok=INSTANCE, errors=(404, 503)),
        "DELETE": Op("Delete an instance", ok=instance.DELETING, errors=(404, 503))}, "cluster"),
    # ---- state, identity, health -------------------------------------------------------------------
    Route("/state", lambda d: state.StateResource(d.replica), {
        "GET": Op("The replicated cluster state (upstream's camelCase shape)", ok=STATE, errors=(503,),
                  query=(Param("wait_after_idx", INTEGER, "long-poll until the state moves past this index"),
                         Param("timeout", NUMBER, "the long-poll's limit in seconds (default 10, at most 30)")))},
          "cluster"),
    Route("/node_id", lambda d: node_id.NodeIdResource(d.node_id), {
        "GET": Op("This node's id (a JSON string)", ok=node_id.NODE_ID)}, "cluster", scope=INFERENCE),
    Route("/health", lambda d: health.HealthResource(d.runner_view, d.version), {
        "GET": Op("Idle or busy (a runner of this node generating), and the version; 503 draining while "
                  "the node restarts in place", ok=health.HEALTH, other={503: health.DRAINING})},
          "cluster", scope=PUBLIC),
    Route("/metrics", lambda d: MetricsResource(d.replica, d.run_dir, d.staging_root), {
        "GET": Op("This node's Prometheus metrics (text format 0.0.4)", ok=METRICS, media="text/plain")},
          "cluster"),
    # ---- diagnostics (upstream's; `/cluster/timeline` before `/cluster/{node_id}`) -------------------
    Route("/v1/diagnostics/node", lambda d: diagnostics.NodeDiagnosticsResource(_diagnostics(d)), {
        "GET": Op("This node: runtime, resources, processes, its runners' flight recorders, placements",
                  ok=NODE_DIAGNOSTICS, query=(ENTRIES,))}, "diagnostics"),
    Route("/v1/diagnostics/node/runners/{runner_id}/cancel",
          lambda d: diagnostics.NodeCancelResource(d.runners, d.replica, d.node_id), {
              "POST": Op("Cancel one task on one of this node's runners", ok=diagnostics.CANCELLED,
                         body=diagnostics.CANCEL_REQUEST, errors=(400, 404, 409, 503))}, "diagnostics"),
    Route("/v1/diagnostics/cluster", lambda d: fanout.ClusterDiagnosticsResource(_fan(d)), {
        "GET": Op("Every node's diagnostics (peers asked at once; unreachable ones listed)", ok=CLUSTER,
                  query=(ENTRIES,))}, "diagnostics"),
    Route("/v1/diagnostics/cluster/timeline", lambda d: fanout.TimelineResource(_fan(d)), {
        "GET": Op("Every rank's flight recorder merged in time order (upstream's ClusterTimeline)",
                  ok=TIMELINE)}, "diagnostics"),
    Route("/v1/diagnostics/cluster/{node_id}", lambda d: fanout.ClusterNodeResource(_fan(d)), {
        "GET": Op("One node's diagnostics (this one, or proxied)", ok=NODE_DIAGNOSTICS, errors=(404, 502),
                  query=(ENTRIES,))}, "diagnostics"),
    Route("/v1/diagnostics/cluster/{node_id}/runners/{runner_id}/cancel",
          lambda d: fanout.ClusterCancelResource(_fan(d), diagnostics.NodeCancelResource(d.runners, d.replica,
                                                                                        d.node_id)), {
              "POST": Op("Cancel one task on a runner of any node (proxied)", ok=diagnostics.CANCELLED,
                         body=diagnostics.CANCEL_REQUEST, errors=(400, 404, 409, 502, 503))}, "diagnostics"),
    # ---- configuration and admin -------------------------------------------------------------------
    Route("/config", lambda d: config.ConfigResource(d.master, d.replica, d.node_id, d.config_file), {
        "GET": Op("This node's skulk.yaml, secrets stripped", ok=config.CONFIG, errors=(500,)),
        "PUT": Op("Validate, save and share the cluster's configuration", ok=config.CONFIG_SAVED,
                  body=config.CONFIG_REQUEST, errors=(400, 422, 503))}, "admin"),
    Route("/events", lambda d: events.EventsResource(d.home), {
        "GET": Op("This node's event log, tagged events oldest first (the newest `limit`)", ok=events.EVENTS,
                  errors=(400,), query=(Param("limit", INTEGER, "how many of the newest events (1000)"),))},
          "cluster"),
    Route("/v1/tracing", lambda d: TracingResource(d.replica, d.master), {
        "GET": Op("Whether new requests are traced (cluster-wide)", ok=TRACING),
        "PUT": Op("Switch tracing cluster-wide for new requests", ok=TRACING, body=TRACING,
                  errors=(400, 422, 503))}, "tracing"),
    # ---- traces (the `/cluster` routes before `/{task_id}`, as upstream registers them) --------------
    Route("/v1/traces", lambda d: traces.TracesResource(d.home), {
        "GET": Op("This node's saved traces, newest first", ok=traces.TRACE_LIST)}, "tracing"),
    Route("/v1/traces/delete", lambda d: traces.TracesDeleteResource(d.home), {
        "POST": Op("Delete this node's parts of these traces", ok=traces.DELETED, body=traces.DELETE_REQUEST,
                   errors=(400, 422))}, "tracing"),
    Route("/v1/traces/cluster", lambda d: traces_cluster.ClusterTracesResource(_traces(d)), {
        "GET": Op("Every reachable node's traces, one entry per task, newest first (unreachable peers listed)",
                  ok=traces.TRACE_LIST)}, "tracing"),
    Route("/v1/traces/cluster/{task_id}", lambda d: traces_cluster.ClusterTraceResource(_traces(d)), {
        "GET": Op("One trace's spans merged from every node that has a part of it", ok=traces.TRACE,
                  errors=(400, 404))}, "tracing"),
    Route("/v1/traces/cluster/{task_id}/stats", lambda d: traces_cluster.ClusterTraceResource(_traces(d)), {
        "GET": Op("One trace's timing summary over every node", ok=traces.TRACE_STATS, errors=(400, 404))},
          "tracing", suffix="stats"),
    Route("/v1/traces/cluster/{task_id}/raw", lambda d: traces_cluster.ClusterTraceResource(_traces(d)), {
        "GET": Op("One trace over every node in the Chrome trace format (opens in Perfetto)",
                  ok=traces.CHROME_TRACE, errors=(400, 404))}, "tracing", suffix="raw"),
    Route("/v1/traces/{task_id}", lambda d: traces.TraceResource(d.home), {
        "GET": Op("One trace's spans on this node, sorted by start", ok=traces.TRACE, errors=(400, 404))},
          "tracing"),
    Route("/v1/traces/{task_id}/stats", lambda d: traces.TraceResource(d.home), {
        "GET": Op("One trace's timing summary on this node", ok=traces.TRACE_STATS, errors=(400, 404))},
          "tracing", suffix="stats"),
    Route("/v1/traces/{task_id}/raw", lambda d: traces.TraceResource(d.home), {
        "GET": Op("One trace on this node in the Chrome trace format (`trace_<id>.json`)",
                  ok=traces.CHROME_TRACE, errors=(400, 404))}, "tracing", suffix="raw"),
    Route("/store/storage", lambda d: store.StorageResource(d.replica, d.node_id, d.home, d.staging_root), {
        "GET": Op("This node's staged models, event log and disk (local only: ask each node)",
                  ok=store.STORAGE)}, "store"),
    Route("/store/purge-staging", lambda d: store.PurgeResource(d.master), {
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
    Route("/admin/clusters", lambda d: clusters.ClustersResource(_fan(d), d.namespace), {
        "GET": Op("The cluster this node belongs to: nodes and their health, each instance as a pool of ranks",
                  ok=clusters.CLUSTERS, errors=(503,))}, "admin"),
    Route("/admin/restart", lambda d: admin.AdminRestartResource(d.master, d.node_id), {
        "POST": Op("Replace a node's process in place (same PID)", ok=admin.RESTARTING, errors=(404, 503),
                   query=(Param("node_id", STRING, "the node to restart (default: this one)"),),
                   other={409: admin.RESTART_ALREADY_PENDING})}, "admin"),
    # ---- the dashboard (static files shipped in the package; reads only this API) --------------------
    Route("/", lambda d: DashboardPageResource(), {
        "GET": Op("The dashboard (one page; upstream's SPA paths serve it too)", ok=PAGE_SCHEMA,
                  media="text/html", errors=(404,))}, "dashboard",
          aliases=tuple(p for path in SPA_PATHS for p in (path, path + "/")), scope=PUBLIC),
    Route("/dashboard/{name}", lambda d: DashboardAssetResource(), {
        "GET": Op("One of the dashboard's files (JavaScript module, CSS, icon)", ok=ASSET_SCHEMA,
                  media="*/*", errors=(404,))}, "dashboard", scope=PUBLIC),
    Route("/api/openapi.json", lambda d: OpenApiResource(d.routes, d.version), {
        "GET": Op("This document", ok=OPENAPI)}, "meta", scope=INFERENCE),
)
