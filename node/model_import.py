"""Putting a model into the store (or a node's models dir): from a local directory, or from
Hugging Face with huggingface-hub. Used by `skulk model add` and the store's download route.

Both land atomically: files go to a hidden work dir beside the destination and the finished,
validated directory is renamed into place, so a reader never sees half a model. An offline
machine or an unknown repo is a FetchError at once (one line: the model and the reason); every
network step has a short deadline.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from skulk.node.model_cards import card_from_dir
from skulk.node.model_files import list_files, remove_tree
from skulk.wire.models import ModelDirError, dir_name

log = logging.getLogger("skulk.store")

WORK_DIR = ".partial"
"""Hidden work area under the destination (skipped by every scan)."""
PROBE_TIMEOUT_S = 10.0
"""Deadline of the first Hugging Face call (which tells offline and unknown repos apart)."""
IGNORE_PATTERNS = ["*.bin", "*.pth", "*.pt", "*.gguf", "*.onnx", "*.h5", "*.msgpack", "*.ot",
                   "original/*", ".*"]
"""Other frameworks' weights in the same repo: MLX loads safetensors only."""

T = TypeVar("T")


class AddFailure(StrEnum):
    """Why a model could not be added (callers branch on this, never on the message)."""

    INVALID = "invalid"  # not a model, a foreign or truncated file, an unsupported architecture
    EXISTS = "exists"  # a model with that id is already there
    WRITE = "write"  # the destination cannot take it (a full or read-only disk)
    FETCH = "fetch"  # the hub or the store could not give it


class FetchError(RuntimeError):
    """A model could not be added; the message is one line naming the model and why."""

    def __init__(self, message: str, reason: AddFailure = AddFailure.INVALID) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class AddResult:
    model_id: str
    directory: Path
    total_bytes: int
    files: int
    source: str
    """`local`, `gguf` (imported), `huggingface`, or `present` (already there: nothing was fetched)."""


def _result(model_id: str, directory: Path, source: str) -> AddResult:
    files = list_files(directory)
    return AddResult(model_id, directory, sum(f.size for f in files), len(files), source)


def _checked_dir(model_id: str) -> str:
    """`org/name` -> its directory name `org--name` (one safe path segment), or FetchError."""
    try:
        name = dir_name(model_id)
    except ModelDirError as exc:
        raise FetchError(f"{model_id}: {exc}") from None
    org, sep, rest = name.partition("--")
    if not sep or not org or not rest or name.startswith(".") or ".." in name or any(c in name for c in "/\\\x00"):
        raise FetchError(f"{model_id}: bad model id: expected org/name")
    return name


def validate_source(source: Path, model_id: str) -> None:
    """`card_from_dir` on a directory whatever its name (through a correctly named symlink),
    so a bad source fails before anything is copied, naming what is missing."""
    with tempfile.TemporaryDirectory(prefix="skulk-validate-") as tmp:
        link = Path(tmp) / _checked_dir(model_id)
        link.symlink_to(source.resolve(), target_is_directory=True)
        try:
            card_from_dir(link)
        except ModelDirError as exc:
            reason = str(exc).split(": ", 1)[-1]
            raise FetchError(f"{model_id}: {source} is not a usable model directory: {reason}") from None


def _install(ready: Path, dest_root: Path, force: bool) -> Path:
    """Rename a finished `<work>/<org>--<name>` into `dest_root` (refused if one is there and
    not `force`: a concurrent add of the same model loses cleanly on the rename)."""
    final = dest_root / ready.name
    if final.exists():
        if not force:
            raise FetchError(f"{ready.name.replace('--', '/', 1)}: already in {dest_root} "
                             "(delete it first, or pass --force)", AddFailure.EXISTS)
        remove_tree(final)
    os.utime(ready)  # the directory's mtime is when it arrived (the registry's downloaded_at)
    try:
        os.rename(ready, final)
    except OSError as exc:
        raise FetchError(f"{ready.name.replace('--', '/', 1)}: cannot move into {final}: {exc}",
                         AddFailure.WRITE) from None
    return final


def default_model_id(source: Path) -> str:
    """A directory named `org--name` is `org/name`; any other is `local/<name>`."""
    org, sep, name = source.resolve().name.partition("--")
    return f"{org}/{name}" if sep and org and name else f"local/{source.resolve().name}"


def add_local_dir(source: Path, dest_root: Path, model_id: str | None = None,
                  force: bool = False) -> AddResult:
    """Copy a model directory into `dest_root/<org>--<name>/` atomically (validated first)."""
    model_id = model_id or default_model_id(source)
    if not source.is_dir():
        raise FetchError(f"{model_id}: {source} is not a directory")
    dir_name = _checked_dir(model_id)
    validate_source(source, model_id)
    dest_root.mkdir(parents=True, exist_ok=True)
    if (dest_root / dir_name).exists() and not force:
        raise FetchError(f"{model_id}: already in {dest_root} (delete it first, or pass --force)", AddFailure.EXISTS)
    work = dest_root / WORK_DIR / f"copy-{uuid.uuid4().hex[:12]}"
    try:
        work.mkdir(parents=True)
        staged = work / dir_name
        try:
            shutil.copytree(source, staged, ignore=shutil.ignore_patterns(".*"))
        except (OSError, shutil.Error) as exc:
            raise FetchError(f"{model_id}: copy from {source} failed: {exc}", AddFailure.WRITE) from None
        final = _install(staged, dest_root, force)
    finally:
        _clean(work)
    return _result(model_id, final, "local")


def _clean(work: Path) -> None:
    """Remove an import's work directory, and the work root with it once nothing else is in it
    (another import running beside this one keeps it)."""
    shutil.rmtree(work, ignore_errors=True)
    with contextlib.suppress(OSError):  # not empty, or already gone
        work.parent.rmdir()


def gguf_file(source: Path) -> Path | None:
    """The GGUF file to import: `source` itself (`*.gguf`), or the one `*.gguf` in a directory
    that holds no model (no config.json); None for anything else."""
    if source.is_file() and source.suffix.lower() == ".gguf":
        return source
    if source.is_dir() and not (source / "config.json").exists():
        found = sorted(p for p in source.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())
        if len(found) > 1:
            raise FetchError(f"{source}: holds {len(found)} .gguf files; name the one to import")
        return found[0] if found else None
    return None


def default_gguf_id(path: Path) -> str:
    """`local/<file name without .gguf>`."""
    return f"local/{path.stem}"


def add_gguf(path: Path, dest_root: Path, model_id: str | None = None, force: bool = False) -> AddResult:
    """Import a GGUF file into `dest_root/<org>--<name>/` (written beside it, renamed into place)."""
    from skulk.node.gguf_import import GGUFError, write_dir

    model_id = model_id or default_gguf_id(path)
    dir_name = _checked_dir(model_id)
    dest_root.mkdir(parents=True, exist_ok=True)
    if (dest_root / dir_name).exists() and not force:
        raise FetchError(f"{model_id}: already in {dest_root} (delete it first, or pass --force)", AddFailure.EXISTS)
    work = dest_root / WORK_DIR / f"gguf-{uuid.uuid4().hex[:12]}"
    try:
        staged = work / dir_name
        staged.mkdir(parents=True)
        try:
            write_dir(path, staged, model_id)
            card_from_dir(staged)
        except GGUFError as exc:
            raise FetchError(f"{model_id}: {exc}") from None
        except ModelDirError as exc:
            raise FetchError(f"{model_id}: {path.name} gave no usable model: {exc}") from None
        except OSError as exc:  # a full disk, a read-only destination
            raise FetchError(f"{model_id}: cannot write the imported model under {dest_root}: "
                             f"{exc.strerror or exc}", AddFailure.WRITE) from None
        final = _install(staged, dest_root, force)
    finally:
        _clean(work)
    return _result(model_id, final, "gguf")


def offline_reason() -> str | None:
    """Why huggingface-hub will not go online here, or None (checked before any network use)."""
    flag = os.environ.get("HF_HUB_OFFLINE", "").strip().lower()
    if flag in ("1", "true", "yes", "on"):
        return "offline mode (HF_HUB_OFFLINE=1)"
    return None


def _within(deadline_s: float, what: str, fn: Callable[[], T]) -> T:
    """Run `fn` with a hard deadline: a name lookup stuck in the resolver cannot hang us."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    t = threading.Thread(target=target, name="skulk-hf-probe", daemon=True)
    t.start()
    t.join(deadline_s)
    if t.is_alive():
        raise TimeoutError(f"{what}: no answer within {deadline_s:.0f}s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def resolve_repo(model_id: str, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[str, dict[str, int | None]]:
    """The repo's current commit and its files (name -> size) that an MLX model needs, or a
    FetchError saying offline / unknown / gated / unreachable."""
    reason = offline_reason()
    if reason:
        raise FetchError(f"{model_id}: cannot download from Hugging Face: {reason}")
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils import filter_repo_objects

    try:
        info = _within(timeout_s + 2.0, f"contacting {constants.ENDPOINT}",
                       lambda: HfApi().model_info(model_id, timeout=timeout_s, files_metadata=True))
    except GatedRepoError:
        raise FetchError(f"{model_id}: gated on Hugging Face (accept its terms and set hf_token)") from None
    except RepositoryNotFoundError:
        raise FetchError(f"{model_id}: no such model on Hugging Face (or private: set hf_token)") from None
    except RevisionNotFoundError as exc:
        raise FetchError(f"{model_id}: {exc}") from None
    except OfflineModeIsEnabled:
        raise FetchError(f"{model_id}: cannot download from Hugging Face: offline mode (HF_HUB_OFFLINE=1)") from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise FetchError(f"{model_id}: Hugging Face answered HTTP {status}") from None
    except Exception as exc:  # noqa: BLE001 - connect errors, DNS, timeouts: the machine is offline
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise FetchError(f"{model_id}: cannot reach {constants.ENDPOINT} (offline?): {first}") from None
    if not info.sha:
        raise FetchError(f"{model_id}: Hugging Face gave no revision")
    siblings = list(info.siblings or [])
    wanted = filter_repo_objects(siblings, ignore_patterns=IGNORE_PATTERNS, key=lambda s: s.rfilename)
    return info.sha, {s.rfilename: s.size for s in wanted}


def partial_bytes(store_path: Path, model_id: str) -> int:
    """Bytes already fetched into a download's work dir (progress for a status route)."""
    total = 0
    for dirpath, _dirs, files in os.walk(store_path / WORK_DIR / _checked_dir(model_id)):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


def download_into_store(model_id: str, store_path: Path, allow_hf_fallback: bool, *,
                        force: bool = False, progress: bool = True,
                        on_total: Callable[[int], None] | None = None,
                        timeout_s: float = PROBE_TIMEOUT_S) -> AddResult:
    """Make `model_id` present in `store_path`: already there -> `present`; else fetched from
    Hugging Face (when `allow_hf_fallback`), resumable (the work dir is per model), checked
    (every expected file, its size, a usable model dir) and renamed into place."""
    dir_name = _checked_dir(model_id)
    final = store_path / dir_name
    if final.is_dir() and not force:
        try:
            card_from_dir(final)
            return _result(model_id, final, "present")
        except ModelDirError:
            pass
    if not allow_hf_fallback:
        raise FetchError(f"{model_id}: not in the store and Hugging Face downloads are off "
                         "(model_store.download.allow_hf_fallback: false)")
    sha, expected = resolve_repo(model_id, timeout_s)
    if on_total is not None:
        on_total(sum(s or 0 for s in expected.values()))
    work_root = store_path / WORK_DIR
    work_root.mkdir(parents=True, exist_ok=True)
    with (work_root / f"{dir_name}.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FetchError(f"{model_id}: already being downloaded into {store_path}") from None
        staged = work_root / dir_name
        _snapshot(model_id, sha, staged, timeout_s, progress)
        shutil.rmtree(staged / ".cache", ignore_errors=True)
        for name, size in expected.items():
            got = staged / name
            if not got.is_file() or (size is not None and got.stat().st_size != size):
                raise FetchError(f"{model_id}: download incomplete ({name} missing or short); run it again to resume")
        try:
            card_from_dir(staged)
        except ModelDirError as exc:
            shutil.rmtree(staged, ignore_errors=True)
            raise FetchError(f"{model_id}: not a usable MLX model: {str(exc).split(': ', 1)[-1]}") from None
        installed = _install(staged, store_path, force)
    return _result(model_id, installed, "huggingface")


def _snapshot(model_id: str, sha: str, staged: Path, timeout_s: float, progress: bool) -> None:
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import disable_progress_bars

    if not progress:
        disable_progress_bars()
    try:
        snapshot_download(model_id, revision=sha, local_dir=staged, ignore_patterns=IGNORE_PATTERNS,
                          etag_timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - network drops mid-way: resumable, say so
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise FetchError(f"{model_id}: download failed ({first}); run it again to resume") from None
