"""The model store's pure parts: ranges, routes and traversal checks, the checksum registry,
reading model directories, and adding models (local directories; Hugging Face offline)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from skulk.node import model_import as fetch
from skulk.node.model_files import list_files, model_dirs, resolve_file
from skulk.node.role_args import StoreRoleArgs
from skulk.scripts.model_add import destination, is_model_id
from skulk.services.store.protocol import (
    BadRequest,
    NotFound,
    RangeNotSatisfiable,
    RouteKind,
    parse_range,
    parse_route,
    safe_rel_path,
)
from skulk.services.store.registry import Registry, stale
from tests.fake_models import make_model

# ---- Range -----------------------------------------------------------------------------------


@pytest.mark.parametrize("header,size,expected", [
    (None, 10, None), ("", 10, None),
    ("bytes=0-", 10, (0, 9)), ("bytes=4-", 10, (4, 9)), ("bytes=9-", 10, (9, 9)),
    ("bytes=2-5", 10, (2, 5)), ("bytes=2-500", 10, (2, 9)), ("bytes=3-3", 10, (3, 3)),
    ("bytes=-3", 10, (7, 9)), ("bytes=-30", 10, (0, 9)), (" Bytes = 1-2 ", 10, (1, 2)),
    # ignored (whole file): other units, several ranges, malformed, reversed
    ("items=0-1", 10, None), ("bytes=0-1,4-5", 10, None), ("bytes=a-", 10, None),
    ("bytes=5-2", 10, None), ("bytes=-", 10, None), ("bytes=1", 10, None),
])
def test_parse_range(header: str | None, size: int, expected: tuple[int, int] | None):
    assert parse_range(header, size) == expected


@pytest.mark.parametrize("header,size", [("bytes=10-", 10), ("bytes=11-20", 10), ("bytes=0-", 0),
                                         ("bytes=-0", 10), ("bytes=-5", 0)])
def test_range_beyond_the_end_is_416(header: str, size: int):
    with pytest.raises(RangeNotSatisfiable):
        parse_range(header, size)


# ---- routes and traversal --------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["config.json", "sub/notes.txt", "a/b/c.safetensors", "x..y"])
def test_safe_rel_path_accepts(raw: str):
    assert safe_rel_path(raw) == raw


@pytest.mark.parametrize("raw", ["", "..", "../x", "a/../../x", "a/./b", "/etc/passwd", "a//b",
                                 "a\\..\\b", "a\x00b", ".cache/x", "sub/.hidden", "a/", "..x"])
def test_safe_rel_path_refuses(raw: str):
    with pytest.raises(BadRequest):
        safe_rel_path(raw)


def test_routes():
    assert parse_route("GET", "/health").kind is RouteKind.HEALTH
    assert parse_route("GET", "/registry?x=1").kind is RouteKind.REGISTRY
    r = parse_route("GET", "/models/org--tiny/files")
    assert (r.kind, r.model_dir, r.model_id) == (RouteKind.FILES, "org--tiny", "org/tiny")
    r = parse_route("GET", "/models/org--tiny/file/sub/notes.txt")
    assert (r.kind, r.rel_path) == (RouteKind.FILE, "sub/notes.txt")
    assert parse_route("GET", "/models/org--tiny/file/sub%2Fnotes.txt").rel_path == "sub/notes.txt"
    assert parse_route("HEAD", "/models/org--tiny/file/a").kind is RouteKind.FILE
    assert parse_route("DELETE", "/models/org--tiny").kind is RouteKind.MODEL
    assert parse_route("POST", "/models/org--tiny/download").kind is RouteKind.DOWNLOAD
    assert parse_route("GET", "/models/org--tiny/download/status").kind is RouteKind.DOWNLOAD_STATUS
    assert parse_route("GET", "/models/org--a--b/files").model_id == "org/a--b"


@pytest.mark.parametrize("target", [
    "/models/org--tiny/file/../../registry.json", "/models/org--tiny/file/%2e%2e/%2e%2e/x",
    "/models/org--tiny/file/..%2f..%2fregistry.json", "/models/org--tiny/file/%2E%2E%2Fx",
    "/models/org--tiny/file//etc/passwd", "/models/org--tiny/file/%2fetc%2fpasswd",
    "/models/org--tiny/file/a%5c..%5cb", "/models/org--tiny/file/a%00b",
    "/models/..%2f..%2fetc/files", "/models/../files", "/models/%2e%2e/files",
    "/models/notamodel/files", "/models/.hidden--x/files", "/models/org--tiny/file/.cache/x",
])
def test_traversal_refused(target: str):
    with pytest.raises(BadRequest):
        parse_route("GET", target)


@pytest.mark.parametrize("method,target", [("GET", "/nope"), ("POST", "/health"),
                                           ("DELETE", "/models/org--tiny/files"),
                                           ("GET", "/models/org--tiny/file"),
                                           ("PUT", "/models/org--tiny"), ("GET", "/models/org--tiny/x/y")])
def test_unknown_routes(method: str, target: str):
    with pytest.raises(NotFound):
        parse_route(method, target)


# ---- reading directories ---------------------------------------------------------------------


def test_list_and_resolve_stay_inside(tmp_path: Path):
    store = tmp_path / "store"
    d = make_model(store)
    (tmp_path / "secret.txt").write_text("outside")
    (d / "escape.txt").symlink_to(tmp_path / "secret.txt")
    (d / "escape_dir").symlink_to(tmp_path, target_is_directory=True)
    (d / "inside_link.json").symlink_to(d / "config.json")
    (d / ".cache").mkdir()
    (d / ".cache" / "junk").write_text("x")
    (d / ".hidden").write_text("x")
    paths = [f.path for f in list_files(d)]
    assert paths == ["config.json", "inside_link.json", "model.safetensors", "sub/notes.txt",
                     "tokenizer.json"]
    assert resolve_file(d, "escape.txt") is None
    assert resolve_file(d, "escape_dir/secret.txt") is None
    assert resolve_file(d, "missing") is None
    assert resolve_file(d, "sub") is None  # a directory is not a file
    assert resolve_file(d, "inside_link.json") == (d / "config.json").resolve()
    assert model_dirs(store) == ["org--tiny"]
    (store / "broken--x").mkdir()  # no config.json: not a model
    assert model_dirs(store) == ["org--tiny"]


# ---- registry --------------------------------------------------------------------------------


class CountingHasher:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, path: Path) -> str:
        self.calls.append(path.name)
        return hashlib.sha256(path.read_bytes()).hexdigest()


def test_registry_hashes_once_and_survives_restart(tmp_path: Path):
    store = tmp_path / "store"
    d = make_model(store)
    files = list_files(d)
    h = CountingHasher()
    reg = Registry(store, hasher=h)
    assert reg.needs_hashing("org--tiny", files)
    sums = reg.checksums("org--tiny", files)
    assert sums["model.safetensors"] == hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest()
    assert len(h.calls) == len(files)
    reg.checksums("org--tiny", files)
    assert len(h.calls) == len(files)  # cached
    assert (store / "registry.json").is_file()

    h2 = CountingHasher()
    again = Registry(store, hasher=h2)  # a restarted store reads the file
    assert not again.needs_hashing("org--tiny", files)
    assert again.checksums("org--tiny", files) == sums and h2.calls == []

    # a changed file (size and mtime) is rehashed, the others are not
    (d / "tokenizer.json").write_text('{"version": "2.0", "more": true}')
    os.utime(d / "tokenizer.json", ns=(time.time_ns(), time.time_ns() + 5_000_000))
    files = list_files(d)
    new = again.checksums("org--tiny", files)
    assert h2.calls == ["tokenizer.json"] and new["tokenizer.json"] != sums["tokenizer.json"]

    again.forget("org--tiny")
    assert Registry(store, hasher=h2).needs_hashing("org--tiny", files)


def test_registry_key_is_path_size_mtime():
    from skulk.node.model_files import FileStat

    cached = {"a": {"size": 1, "mtime_ns": 5, "sha256": "x"}, "b": {"size": 2, "mtime_ns": 5, "sha256": "y"},
              "c": {"size": 3, "mtime_ns": 5}}
    files = [FileStat("a", 1, 5), FileStat("b", 2, 6), FileStat("c", 3, 5), FileStat("d", 4, 5)]
    assert [f.path for f in stale(files, cached)] == ["b", "c", "d"]


def test_unreadable_registry_is_recomputed(tmp_path: Path):
    store = tmp_path / "store"
    make_model(store)
    (store / "registry.json").write_text("{not json")
    h = CountingHasher()
    reg = Registry(store, hasher=h)
    reg.checksums("org--tiny", list_files(store / "org--tiny"))
    assert h.calls and (store / "registry.json").read_text().startswith("{")


# ---- adding models ---------------------------------------------------------------------------


def test_add_local_dir_is_atomic_and_validated(tmp_path: Path):
    src = make_model(tmp_path / "src", "my-model")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("x")
    dest = tmp_path / "store"
    result = fetch.add_local_dir(src, dest, model_id="acme/my-model")
    assert result.model_id == "acme/my-model" and result.source == "local"
    assert result.directory == dest / "acme--my-model" and result.files == 4
    assert (dest / "acme--my-model" / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    assert not (dest / "acme--my-model" / ".git").exists()
    assert not (dest / fetch.WORK_DIR).exists()  # no work dir left behind
    with pytest.raises(fetch.FetchError, match="acme/my-model: already in"):
        fetch.add_local_dir(src, dest, model_id="acme/my-model")
    fetch.add_local_dir(src, dest, model_id="acme/my-model", force=True)
    assert fetch.default_model_id(src) == "local/my-model"
    assert fetch.default_model_id(make_model(tmp_path / "src", "org--named")) == "org/named"


@pytest.mark.parametrize("breakage,needle", [
    ("config", "no config.json"), ("weights", "no *.safetensors weights"),
    ("layers", "lacks num_hidden_layers/hidden_size"),
])
def test_add_local_dir_names_what_is_missing(tmp_path: Path, breakage: str, needle: str):
    src = make_model(tmp_path / "src", "org--bad")
    if breakage == "config":
        (src / "config.json").unlink()
    elif breakage == "weights":
        (src / "model.safetensors").unlink()
    else:
        (src / "config.json").write_text("{}")
    with pytest.raises(fetch.FetchError) as err:
        fetch.add_local_dir(src, tmp_path / "store")
    assert str(err.value).startswith("org/bad: ") and needle in str(err.value)
    assert not (tmp_path / "store" / "org--bad").exists()


def test_download_offline_fails_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with pytest.raises(fetch.FetchError, match=r"^acme/absent: .*offline mode \(HF_HUB_OFFLINE=1\)"):
        fetch.download_into_store("acme/absent", tmp_path / "store", allow_hf_fallback=True)
    assert time.monotonic() - started < 2.0
    with pytest.raises(fetch.FetchError, match="allow_hf_fallback: false"):
        fetch.download_into_store("acme/absent", tmp_path / "store", allow_hf_fallback=False)
    make_model(tmp_path / "store", "acme--here")
    result = fetch.download_into_store("acme/here", tmp_path / "store", allow_hf_fallback=False)
    assert result.source == "present" and result.files == 4
    with pytest.raises(fetch.FetchError, match="not of the form org/name"):
        fetch.download_into_store("noslash", tmp_path / "store", allow_hf_fallback=True)


def test_destination_and_ids(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    assert destination(home, None, None) == home.resolve() / "models"
    assert destination(home, tmp_path / "s", None) == (tmp_path / "s").resolve()
    (home / "skulk.yaml").write_text(f"model_store: {{store_host: box, store_path: {tmp_path / 'st'}}}\n")
    assert destination(home, None, None) == tmp_path / "st"
    assert is_model_id("org/name") and not is_model_id("org/name/x") and not is_model_id("./a/b")


def test_store_role_arguments():
    def serves(*argv: str) -> bool:
        return StoreRoleArgs.from_argv(argv).serves_store()

    store = ("--store-path", "/s", "--store-host", "box")
    assert not serves()  # no store
    assert serves(*store, "--is-store-host", "1")  # decided by the supervisor
    assert not serves(*store, "--is-store-host", "0", "--node-name", "box")
    assert serves("--store-path", "/s", "--store-host", "Box", "--node-name", "box")  # else by name
    assert serves("--store-path", "/s", "--store-host", "n1", "--node-id", "n1")
    assert not serves("--store-path", "/s", "--store-host", "other", "--node-name", "box", "--node-id", "n1")
    with pytest.raises(SystemExit):  # half a store (no path) is refused at start
        StoreRoleArgs.from_argv(["--store-host", "box", "--is-store-host", "1"])
