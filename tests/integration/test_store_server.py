"""The model store over real HTTP: file lists and checksums, Range resumes, traversal refused,
DELETE; the store role as a real process (heart-beating while a peer streams); and
`skulk model add` for a directory and, offline, for a Hugging Face id."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from skulk.node.model_store import StoreSlice
from skulk.node.role_args import ChildArgs, StoreRoleArgs
from skulk.services.store.registry import Registry
from skulk.services.store.server import StoreApp, StoreServer, serve
from skulk.wire import codec, endpoints
from skulk.wire.control import ChildReady, Heartbeat
from skulk.wire.sockets import make_socket
from tests.fake_models import WEIGHTS_BYTES, make_model
from tests.integration.patience import patience
from tools.ports import free_port


class Client:
    """Raw http.client requests: the target goes out exactly as written (no normalising)."""

    def __init__(self, port: int) -> None:
        self.port = port

    def request(self, method: str, target: str, headers: dict[str, str] | None = None
                ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, target, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def json(self, method: str, target: str) -> tuple[int, Any]:
        status, _h, body = self.request(method, target)
        return status, json.loads(body)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[Path, Client]]:
    root = tmp_path / "store"
    make_model(root, "org--tiny")
    (tmp_path / "secret.txt").write_text("outside the store")
    (root / "org--tiny" / "escape.txt").symlink_to(tmp_path / "secret.txt")
    server: StoreServer = serve(StoreApp(root, Registry(root), allow_hf_fallback=False),
                                "127.0.0.1", free_port())
    try:
        yield root, Client(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_health_registry_and_files(store: tuple[Path, Client]):
    root, client = store
    status, health = client.json("GET", "/health")
    assert status == 200 and health["store_path"] == str(root)
    assert health["total_bytes"] >= health["free_bytes"] > 0 and health["used_bytes"] > 0

    status, reg = client.json("GET", "/registry")
    assert status == 200 and len(reg["entries"]) == 1
    entry = reg["entries"][0]
    want = {"model_id": "org/tiny", "dir": "org--tiny", "files": 4}
    assert {k: entry[k] for k in want} == want
    assert entry["total_bytes"] > WEIGHTS_BYTES and entry["downloaded_at"].endswith("Z")

    status, listing = client.json("GET", "/models/org--tiny/files")
    assert status == 200 and listing["model_id"] == "org/tiny"
    paths = [f["path"] for f in listing["files"]]
    assert paths == ["config.json", "model.safetensors", "sub/notes.txt", "tokenizer.json"]  # no escape.txt
    for f in listing["files"]:
        data = (root / "org--tiny" / f["path"]).read_bytes()
        assert f["size"] == len(data) and f["sha256"] == hashlib.sha256(data).hexdigest()
        status, headers, body = client.request("GET", f"/models/org--tiny/file/{f['path']}")
        assert status == 200 and body == data and headers["content-length"] == str(len(data))
    assert listing["total_bytes"] == sum(f["size"] for f in listing["files"]) == entry["total_bytes"]
    cached = json.loads((root / "registry.json").read_text())["models"]["org--tiny"]["files"]
    assert set(cached) == set(paths)
    assert client.json("GET", "/models/org--absent/files")[0] == 404


def test_range_requests_resume_byte_exact(store: tuple[Path, Client]):
    root, client = store
    data = (root / "org--tiny" / "model.safetensors").read_bytes()
    url = "/models/org--tiny/file/model.safetensors"
    for offset in (0, 1, 4096, 123_457, len(data) - 1):
        status, headers, body = client.request("GET", url, {"Range": f"bytes={offset}-"})
        assert status == 206 and body == data[offset:]
        assert headers["content-range"] == f"bytes {offset}-{len(data) - 1}/{len(data)}"
        assert headers["content-length"] == str(len(data) - offset)
    status, headers, body = client.request("GET", url, {"Range": "bytes=100-199"})
    assert status == 206 and body == data[100:200] and headers["content-length"] == "100"
    status, _h, body = client.request("GET", url, {"Range": "bytes=-10"})
    assert status == 206 and body == data[-10:]
    status, headers, _b = client.request("GET", url, {"Range": f"bytes={len(data)}-"})
    assert status == 416 and headers["content-range"] == f"bytes */{len(data)}"
    status, headers, body = client.request("HEAD", url)
    assert status == 200 and body == b"" and headers["content-length"] == str(len(data))
    # a client that resumes from what it already has ends with the whole file
    have = data[:50_000]
    _s, _h, rest = client.request("GET", url, {"Range": f"bytes={len(have)}-"})
    assert hashlib.sha256(have + rest).hexdigest() == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("target", [
    "/models/org--tiny/file/../../registry.json",
    "/models/org--tiny/file/%2e%2e/%2e%2e/secret.txt",
    "/models/org--tiny/file/..%2f..%2fsecret.txt",
    "/models/org--tiny/file/%2E%2E%2F%2E%2E%2Fsecret.txt",
    "/models/org--tiny/file//etc/passwd",
    "/models/org--tiny/file/%2fetc%2fpasswd",
    "/models/org--tiny/file/escape.txt",
    "/models/org--tiny/file/sub/..%2f..%2f..%2fsecret.txt",
    "/models/..%2f..%2f/file/secret.txt",
    "/models/%2e%2e/file/secret.txt",
    "/models/org--tiny/file/%252e%252e/%252e%252e/secret.txt",
    "/models/org--tiny/file/a%5c..%5c..%5csecret.txt",
])
def test_traversal_is_refused(store: tuple[Path, Client], target: str):
    _root, client = store
    status, _h, body = client.request("GET", target)
    assert status in (400, 404), (target, status)
    assert b"outside the store" not in body and b"root:" not in body


def test_delete_and_download_routes(store: tuple[Path, Client]):
    root, client = store
    assert client.json("DELETE", "/models/org--absent") == (404, {"error": "Model org/absent not in store"})
    status, body = client.json("POST", "/models/org--absent/download")
    assert status == 409 and "allow_hf_fallback" in body["error"]
    assert client.json("GET", "/models/org--tiny/files")[0] == 200
    assert client.json("DELETE", "/models/org--tiny") == (200, {"modelId": "org/tiny", "deleted": True})
    assert not (root / "org--tiny").exists()
    assert not any(p.name.startswith(".deleting") for p in root.iterdir())
    assert client.json("GET", "/models/org--tiny/files")[0] == 404
    assert client.json("GET", "/registry") == (200, {"entries": []})
    assert "org--tiny" not in json.loads((root / "registry.json").read_text())["models"]


def _child(tmp_path: Path, store_dir: Path, port: int) -> tuple[subprocess.Popen[bytes], zmq.Socket[Any]]:
    home, run = tmp_path / "home", tmp_path / "run"
    run.mkdir(parents=True)
    pull = make_socket(zmq.Context.instance(), zmq.PULL, hwm=1000, bind=endpoints.supervisor_notify(run))
    shared = ChildArgs(child_id="store", title="store", home=home, run_dir=run, heartbeat_s=0.2)
    own = StoreRoleArgs(listen="127.0.0.1", store=StoreSlice(store_host="here", store_path=store_dir,
                                                             store_port=port, is_store_host=True))
    argv = [sys.executable, "-m", "skulk.services.store", *shared.to_argv(), *own.to_argv()]
    env = dict(os.environ, SKULK_PARENT_PID=str(os.getpid()))
    return subprocess.Popen(argv, env=env, start_new_session=True), pull


def _next(pull: zmq.Socket[Any], kind: type, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        if pull.poll(int(left * 1000) + 1):
            msg = codec.decode(pull.recv())
            if isinstance(msg, kind):
                return msg
    raise AssertionError(f"no {kind.__name__} within {timeout_s}s")


def test_store_role_serves_and_keeps_beating(tmp_path: Path):
    """The real role process: ready, serving, and its loop beats while a peer holds a slow
    stream of a large file open (the server lives in threads, not in the loop)."""
    store_dir = tmp_path / "store"
    d = make_model(store_dir)
    big = os.urandom(8 << 20)
    (d / "big.safetensors").write_bytes(big)
    port = free_port()
    proc, pull = _child(tmp_path, store_dir, port)
    try:
        _next(pull, ChildReady, 20)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/models/org--tiny/file/big.safetensors", headers={"Range": "bytes=1000-"})
        resp = conn.getresponse()
        assert resp.status == 206
        first = resp.read(10)  # then stop reading: the server's thread blocks on a full socket
        beats = [_next(pull, Heartbeat, 2).seq for _ in range(5)]
        assert beats == sorted(beats) and len(set(beats)) == 5
        listing = Client(port).json("GET", "/models/org--tiny/files")[1]  # served meanwhile
        assert {f["path"]: f["sha256"] for f in listing["files"]}["big.safetensors"] == hashlib.sha256(big).hexdigest()
        assert first + resp.read() == big[1000:]
        conn.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=patience(10)) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=patience(10))
        pull.close(0)


def _cli(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "add", *args],
                         capture_output=True, text=True, timeout=60, env=dict(os.environ, **(env or {})))
    return out, time.monotonic() - started


def test_model_add_directory_and_offline_id(tmp_path: Path):
    src = make_model(tmp_path / "src", "acme--tiny")
    home = tmp_path / "home"
    out, _t = _cli(str(src), "--home", str(home))
    assert out.returncode == 0, out.stderr
    assert "acme/tiny added to" in out.stdout and (home / "models" / "acme--tiny" / "config.json").is_file()
    out, _t = _cli(str(src), "--store-path", str(tmp_path / "store"), "--model-id", "other/name")
    assert out.returncode == 0 and (tmp_path / "store" / "other--name" / "model.safetensors").is_file()
    (src / "config.json").unlink()
    out, _t = _cli(str(src), "--store-path", str(tmp_path / "store2"))
    assert out.returncode == 1 and out.stderr.strip().endswith("not a usable model directory: no config.json")
    assert out.stderr.count("\n") == 1 and "acme/tiny" in out.stderr

    out, took = _cli("acme/no-such-model", "--store-path", str(tmp_path / "store"), env={"HF_HUB_OFFLINE": "1"})
    assert out.returncode == 1 and took < patience(15)
    assert out.stderr == \
        "skulk: acme/no-such-model: cannot download from Hugging Face: offline mode (HF_HUB_OFFLINE=1)\n"
    # no network (here: an endpoint nobody listens on) is a clear error at once too
    env = {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
    out, took = _cli("acme/no-such-model", "--store-path", str(tmp_path / "store"), env=env)
    assert out.returncode == 1 and took < patience(15), out.stderr
    assert out.stderr.startswith("skulk: acme/no-such-model: cannot reach http://127.0.0.1:")
    assert out.stderr.count("\n") == 1
    assert not (tmp_path / "store" / "acme--no-such-model").exists()


def test_download_route_offline_fails_with_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    root = tmp_path / "store"
    root.mkdir()
    app = StoreApp(root, Registry(root), allow_hf_fallback=True)
    server = serve(app, "127.0.0.1", free_port())
    client = Client(server.server_address[1])
    try:
        status, body = client.json("POST", "/models/acme--absent/download")
        assert status == 202 and body["modelId"] == "acme/absent"
        job = app.jobs["acme/absent"]
        assert job.thread is not None
        job.thread.join(patience(10))
        status, body = client.json("GET", "/models/acme--absent/download/status")
        assert status == 200 and body["status"] == "failed"
        assert body["error"] == "acme/absent: cannot download from Hugging Face: offline mode (HF_HUB_OFFLINE=1)"
        assert client.json("GET", "/models/acme--other/download/status")[0] == 404
    finally:
        server.shutdown()
        server.server_close()
