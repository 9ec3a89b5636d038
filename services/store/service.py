"""The store role: the node's model files; on the store host, the LAN model store over HTTP.

Store host (`--store-path` given, and `--store-host` names this node or `--is-store-host 1`):
an HTTP server on `--store-port` serves `--store-path` (docs/operations.md, "The model store")
from daemon threads, and one hashing thread keeps `registry.json`'s checksums warm so peers'
first listings rarely wait.
The poll loop paces the rescans, keeps heart-beating, and every 2 s publishes this node's model
cards (the catalog: `<home>/models`, and the store on the store host; reading a few
`config.json` files and stats, no file contents).
"""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path

from skulk.cluster.catalog import CatalogReport
from skulk.node.model_cards import scan
from skulk.node.model_files import list_files, model_dirs
from skulk.node.role_args import StoreRoleArgs
from skulk.services.base import ServiceLoop
from skulk.services.store.registry import Registry
from skulk.services.store.server import StoreApp, serve
from skulk.wire.topics import EVT_CATALOG

log = logging.getLogger("skulk.store")

SCAN_INTERVAL_S = 10.0
CATALOG_INTERVAL_S = 2.0
"""The catalog is re-sent this often (the bus is lossy; the master forwards changes only)."""


def publish_catalog(loop: ServiceLoop, models: Path, store: Path | None) -> None:
    """This node's models (and, on the store host, the store's) for the replicated catalog."""
    local, _bad = scan(models)
    loop.publish(EVT_CATALOG, CatalogReport(cards=tuple(local.values())), suffix="models")
    if store is not None:
        stored, _bad = scan(store)
        loop.publish(EVT_CATALOG, CatalogReport(cards=tuple(stored.values()), in_store=True), suffix="store")


class Hasher:
    """The one thread that rescans the store and computes missing checksums, off the loop."""

    def __init__(self, store: Path, registry: Registry) -> None:
        self.store = store
        self.registry = registry
        self.summary = ""
        self._wake: queue.Queue[None] = queue.Queue(maxsize=1)
        threading.Thread(target=self._run, name="store-hasher", daemon=True).start()

    def poke(self) -> None:
        """Ask for a rescan (coalesced: at most one pending)."""
        try:
            self._wake.put_nowait(None)
        except queue.Full:
            pass

    def _run(self) -> None:
        while True:
            self._wake.get()
            try:
                self._rescan()
            except Exception:  # noqa: BLE001 - a bad directory must not end the hashing thread
                log.exception("store: rescan failed")

    def _rescan(self) -> None:
        names = model_dirs(self.store)
        self.registry.prune(names)
        total = 0
        for name in names:
            files = list_files(self.store / name)
            total += sum(f.size for f in files)
            self.registry.downloaded_at(name)
            if self.registry.needs_hashing(name, files):
                log.info("store: computing checksums of %s (%d files)", name, len(files))
                self.registry.checksums(name, files)
        self.registry.save_if_changed()
        self.summary = f"{len(names)} model(s), {total / 2**30:.1f} GiB"


def setup(loop: ServiceLoop, argv: list[str]) -> None:
    args = StoreRoleArgs.from_argv(argv)
    slice_ = args.store
    models = loop.rt.args.home / "models"
    models.mkdir(parents=True, exist_ok=True)
    if slice_ is None or not args.serves_store():
        loop.every(CATALOG_INTERVAL_S, lambda: publish_catalog(loop, models, None), first_in=0.0)

        def scan() -> None:
            where = f"; store at {slice_.store_path} (another node hosts it)" if slice_ else ""
            loop.status_detail = f"{len(model_dirs(models))} model(s) in {models}{where}"

        scan()
        loop.every(SCAN_INTERVAL_S, scan)
        return

    store = slice_.store_path.expanduser().resolve()
    store.mkdir(parents=True, exist_ok=True)
    loop.every(CATALOG_INTERVAL_S, lambda: publish_catalog(loop, models, store), first_in=0.0)
    registry = Registry(store)
    server = serve(StoreApp(store, registry, slice_.allow_hf_fallback), args.listen, slice_.store_port)
    port = server.server_address[1]
    hasher = Hasher(store, registry)

    def tick() -> None:
        hasher.poke()
        loop.status_detail = f"serving {store} on :{port}" + (f": {hasher.summary}" if hasher.summary else "")

    def stop() -> None:
        server.shutdown()
        server.server_close()

    tick()
    loop.every(SCAN_INTERVAL_S, tick)
    loop.on_stop(stop)
