"""`GET /metrics`: this node's Prometheus metrics in the text format (version 0.0.4).

Each scrape merges what every process of the node wrote to the shared multiprocess directory
(the API's workers, the worker's runner figures, the eventlog: `node/metrics.py`), drops the
series of runners no longer in the state, and adds what is read now: the supervisor's restarts
and process states, and the staged copies on disk. Outside a node (no multiprocess directory)
it serves this process's own registry.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

import falcon
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from skulk.cluster.replica import StateReplica
from skulk.node import metrics
from skulk.node.staged import staged_copies
from skulk.services.api.http.schema import STRING, Schema
from skulk.services.api.links.supervisor_link import supervisor_status

log = logging.getLogger("skulk.api.metrics")

METRICS: Schema = STRING
"""The Prometheus text exposition format (`text/plain; version=0.0.4`)."""


class NodeCollector(Collector):
    """One scrape's metric families: the processes' files, then what is read now."""

    def __init__(self, replica: StateReplica, run_dir: Path, staging_root: Path | None) -> None:
        self.replica, self.run_dir, self.staging = replica, run_dir, staging_root

    def collect(self) -> Iterator[Metric]:
        state = self.replica.get(timeout=0)
        live = metrics.live_runners(state) if state is not None else None
        yield from metrics.only_live_runners(self._written(), live)
        status = supervisor_status(self.run_dir)
        if status is None:
            log.warning("metrics: the supervisor did not answer; restarts and processes left out")
        else:
            yield from metrics.supervisor_families(status.children)
        copies = staged_copies(self.staging) if self.staging is not None else []
        yield from metrics.staging_families([c.size_bytes for c in copies])

    @staticmethod
    def _written() -> Iterable[Metric]:
        path = metrics.multiproc_dir()
        return MultiProcessCollector(None, path).collect() if path else REGISTRY.collect()


class MetricsResource:
    def __init__(self, replica: StateReplica, run_dir: Path, staging_root: Path | None) -> None:
        self.collector = NodeCollector(replica, run_dir, staging_root)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        resp.content_type = CONTENT_TYPE_PLAIN_0_0_4
        resp.data = generate_latest(registry)
