"""Copy a model from the store into this node's staging root, verified and atomic.

The copy goes into `<root>/.<org>--<name>.partial/` file by file: a file already there is
resumed with a `Range` request from its size, every file is checked against the store's size
and sha256, and only a complete, verified copy is renamed to `<root>/<org>--<name>/` (with a
marker file), so a half copy is never what a runner loads. A lost store connection is retried
a few times (the store role restarts in about a second) and the copy resumes where it was;
a checksum that does not match fails the copy at once.

`Stager` runs one copy per model in a thread (HTTP reads block) and hands progress to the
worker's loop through a queue: the loop never waits on the network.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.client import HTTPException
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from skulk.node.staged import LAST_USED, MARK, is_staged
from skulk.services import faults
from skulk.wire import curve
from skulk.wire.models import dir_name
from skulk.wire.staging import DownloadKind, DownloadProgress

log = logging.getLogger("skulk.worker")

CHUNK = 256 * 1024
TIMEOUT_S = 10.0
LISTING_TIMEOUT_S = 300.0
"""The first listing of a model the store has not hashed yet computes its checksums in the
request (a large model takes minutes to hash)."""
ATTEMPTS = 4
REPORT_EVERY_S = 1.0
"""Ongoing progress is replicated cluster-wide: at most once a second per copy."""


class CopyError(Exception):
    """The copy cannot complete (the message says why, for `DownloadFailed`)."""


def _get(url: str, offset: int = 0, timeout: float = TIMEOUT_S) -> urllib.response.addinfourl:
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    req = urllib.request.Request(url, headers={**headers, **curve.store_headers()})
    return urllib.request.urlopen(req, timeout=timeout)  # noqa: S310 - the store's own URL


def _safe(rel: str) -> PurePosixPath:
    path = PurePosixPath(rel)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise CopyError(f"the store listed an unsafe path {rel!r}")
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def copy_model(base_url: str, model_id: str, root: Path, report: Callable[[int, int], None]) -> Path:
    """Copy (or finish copying) `model_id` into `root`; the final directory's path."""
    name = dir_name(model_id)
    final = root / name
    if is_staged(final):
        return final
    with _get(f"{base_url}/models/{name}/files", timeout=LISTING_TIMEOUT_S) as resp:
        listing = json.loads(resp.read())
    files = listing["files"]
    total = sum(int(f["size"]) for f in files)
    part = root / f".{name}.partial"
    part.mkdir(parents=True, exist_ok=True)
    done = 0
    for f in files:
        rel, size = _safe(f["path"]), int(f["size"])
        dest = part / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        have = dest.stat().st_size if dest.exists() else 0
        if have > size:
            dest.unlink()
            have = 0
        done += have
        if have < size:
            with _get(f"{base_url}/models/{name}/file/{quote(rel.as_posix())}", have) as resp, dest.open("ab") as out:
                if have and resp.status != 206:  # the store ignored the range: start the file over
                    out.truncate(0)
                    done -= have
                while chunk := resp.read(CHUNK):
                    out.write(chunk)
                    done += len(chunk)
                    report(done, total)
                    if faults.ENABLED:
                        faults.inject("worker", "stage_chunk")
        if dest.stat().st_size < size:  # the connection ended early (the store stopped): resume
            raise ConnectionError(f"{rel}: the store sent {dest.stat().st_size} of {size} bytes")
        if dest.stat().st_size != size or _sha256(dest) != f["sha256"]:
            dest.unlink(missing_ok=True)
            raise CopyError(f"{model_id}: {rel} does not match the store's size and sha256 "
                            "(corrupt in the store or in transit); not staged")
    (part / MARK).write_text(json.dumps({"model_id": model_id, "files": files}))
    (part / LAST_USED).touch()
    if final.exists():  # an unmarked leftover (a crash between copy and mark): replaced
        shutil.rmtree(final)
    part.rename(final)
    return final


class Stager:
    """Copies in background threads; `poll()` returns their progress for the loop to publish."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.running: set[str] = set()
        self.failed: dict[str, str] = {}
        self._events: queue.Queue[DownloadProgress] = queue.Queue()
        self.stopping = threading.Event()  # set at the worker's stop: back-offs end at once

    def want(self, model_id: str, base_url: str) -> None:
        """Start copying `model_id` from the store at `base_url` unless a copy is under way (or
        failed: `retry` first)."""
        if model_id in self.running or model_id in self.failed:
            return
        self.running.add(model_id)
        self._events.put(DownloadProgress(model_id=model_id, kind=DownloadKind.PENDING))
        threading.Thread(target=self._copy, args=(model_id, base_url), name=f"stage-{model_id}", daemon=True).start()

    def retry(self, model_id: str) -> None:
        self.failed.pop(model_id, None)

    def poll(self) -> list[DownloadProgress]:
        out: list[DownloadProgress] = []
        while True:
            try:
                progress = self._events.get_nowait()
            except queue.Empty:
                return out
            if progress.kind in (DownloadKind.COMPLETED, DownloadKind.FAILED):
                self.running.discard(progress.model_id)
                if progress.kind == DownloadKind.FAILED:
                    self.failed[progress.model_id] = progress.error_message
            out.append(progress)

    def _copy(self, model_id: str, base_url: str) -> None:
        started, last = time.monotonic(), [0.0]
        sizes = [0, 0]

        def report(done: int, total: int) -> None:
            sizes[:] = [done, total]
            now = time.monotonic()
            if now - last[0] >= REPORT_EVERY_S:
                last[0] = now
                rate = done / max(now - started, 1e-6)
                self._events.put(DownloadProgress(model_id=model_id, kind=DownloadKind.ONGOING,
                                                  done_bytes=done, total_bytes=total, rate_bps=rate))

        error = ""
        for attempt in range(ATTEMPTS):
            try:
                copy_model(base_url, model_id, self.root, report)
                self._events.put(DownloadProgress(model_id=model_id, kind=DownloadKind.COMPLETED,
                                                  done_bytes=sizes[1], total_bytes=sizes[1]))
                return
            except CopyError as exc:
                error = str(exc)
                break
            except (urllib.error.URLError, HTTPException, OSError, ValueError, KeyError) as exc:
                if isinstance(exc, urllib.error.HTTPError) and exc.code == 404:
                    error = f"{model_id} is not in the store ({base_url})"
                    break
                error = f"copying {model_id} from the store at {base_url} failed: {exc}"
                log.warning("%s (attempt %d of %d)", error, attempt + 1, ATTEMPTS)
                if self.stopping.wait(0.5 * 2 ** attempt):  # the store role restarts in about a second
                    return
        log.error("staging %s failed: %s", model_id, error)
        self._events.put(DownloadProgress(model_id=model_id, kind=DownloadKind.FAILED,
                                          done_bytes=sizes[0], total_bytes=sizes[1], error_message=error))
