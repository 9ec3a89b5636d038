"""The pure parts of API keys and client limits: parsing `api.keys` (never echoing a key),
finding a key by its hash, the scope decision for every case, the key a request presents, the
startup warnings, the stream slots (lock files: a holder's death frees its slot), a stream that
stops when its client stops reading, and the middleware on a Falcon test app."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
from pathlib import Path

import falcon
import falcon.testing
import pytest

from skulk.node import config as node_config
from skulk.node.api_keys import ApiKey, ConfigError, Scope, digest, find, from_file, parse
from skulk.services.api.http.auth import (
    AuthMiddleware,
    Policy,
    Verdict,
    decide,
    presented_key,
    startup_warnings,
)
from skulk.services.api.http.declare import Limits
from skulk.services.api.http.errors import error_body
from skulk.services.api.http.limits import LimitsMiddleware, StreamSlots, WatchedStream, bucket_of
from skulk.services.api.http.request_body import json_body

ADMIN_TEXT = "admin-0123456789abcdef"
INFER_TEXT = "infer-0123456789abcdef"
ADMIN = ApiKey("ops", Scope.ADMIN, digest(ADMIN_TEXT))
INFER = ApiKey("app", Scope.INFERENCE, digest(INFER_TEXT))
KEYS = (ADMIN, INFER)


# ---- parsing ----------------------------------------------------------------------------------

def test_keys_parse_from_plaintext_or_hash_and_keep_only_the_hash():
    keys = parse([{"name": "ops", "scope": "admin", "key_sha256": hashlib.sha256(ADMIN_TEXT.encode()).hexdigest()},
                  {"name": "app", "scope": "inference", "key": INFER_TEXT}], "api.keys")
    assert keys == KEYS
    assert [k.plaintext for k in keys] == [False, True]
    assert INFER_TEXT not in repr(keys) and INFER_TEXT not in str(keys)
    assert parse(None, "api.keys") == ()


@pytest.mark.parametrize("entry, complaint", [
    ({"name": "x", "scope": "root", "key": INFER_TEXT}, "scope: must be inference or admin"),
    ({"scope": "admin", "key": INFER_TEXT}, "name: required"),
    ({"name": "x", "scope": "admin"}, "exactly one of key and key_sha256"),
    ({"name": "x", "scope": "admin", "key": INFER_TEXT, "key_sha256": "0" * 64}, "exactly one"),
    ({"name": "x", "scope": "admin", "key": "short-secret"}, "at least 16 characters"),
    ({"name": "x", "scope": "admin", "key_sha256": "short-secret-not-hex"}, "64 hex digits"),
    ({"name": "x", "scope": "admin", "key": INFER_TEXT, "token": 1}, "unknown key token"),
    ("short-secret", "expected a mapping"),
])
def test_a_bad_entry_is_named_and_its_key_is_never_echoed(entry, complaint):
    with pytest.raises(ConfigError, match=complaint) as err:
        parse([entry], "skulk.yaml: api.keys")
    assert "short-secret" not in str(err.value) and INFER_TEXT not in str(err.value)
    assert "api.keys[0]" in str(err.value)


def test_names_and_keys_are_unique():
    with pytest.raises(ConfigError, match="'a' is used twice"):
        parse([{"name": "a", "scope": "admin", "key": ADMIN_TEXT},
               {"name": "a", "scope": "admin", "key": INFER_TEXT}], "k")
    with pytest.raises(ConfigError, match="the same key"):
        parse([{"name": "a", "scope": "admin", "key": ADMIN_TEXT}, {"name": "b", "scope": "inference",
                                                                   "key": ADMIN_TEXT}], "k")
    with pytest.raises(ConfigError, match="expected a list"):
        parse({"name": "a"}, "k")


def test_the_node_config_validates_api_keys_and_limits(tmp_path):
    cfg = node_config.validate({"api": {"keys": [{"name": "a", "scope": "admin", "key": ADMIN_TEXT}],
                                        "open_admin": True, "max_body_mb": 1, "max_messages": 8,
                                        "max_streams_per_key": 2, "write_timeout_s": 5}}, tmp_path)
    assert cfg.api_keys == (ApiKey("a", Scope.ADMIN, digest(ADMIN_TEXT)),) and cfg.api_open_admin
    assert (cfg.api_max_body_mb, cfg.api_max_messages, cfg.api_max_streams_per_key) == (1.0, 8, 2)
    assert ADMIN_TEXT not in repr(cfg)
    with pytest.raises(ConfigError, match="api.keys"):
        node_config.validate({"api": {"keys": [{"name": "a", "scope": "admin", "key": "x"}]}}, tmp_path)
    with pytest.raises(ConfigError, match="max_messages"):
        node_config.validate({"api": {"max_messages": 0}}, tmp_path)


def test_the_api_reads_its_keys_from_the_file(tmp_path):
    path = tmp_path / "skulk.yaml"
    assert from_file(path) == ()
    path.write_text(f"api:\n  keys:\n  - {{name: a, scope: inference, key: {INFER_TEXT}}}\n")
    assert from_file(path) == (ApiKey("a", Scope.INFERENCE, digest(INFER_TEXT)),)
    path.write_text(f"api: {{keys: [{INFER_TEXT}\n")  # broken YAML: the error says which kind, not the text
    with pytest.raises(ConfigError) as err:
        from_file(path)
    assert INFER_TEXT not in str(err.value)


# ---- the decision -------------------------------------------------------------------------------

def test_find_compares_every_hash():
    assert find(KEYS, ADMIN_TEXT) is ADMIN and find(KEYS, INFER_TEXT) is INFER
    assert find(KEYS, "nope") is None and find((), ADMIN_TEXT) is None


def test_scopes_with_keys():
    keyed = Policy(KEYS, listen="0.0.0.0")
    for remote in (True, False):
        assert decide(keyed, Scope.PUBLIC, None, remote)[0] is Verdict.ALLOW
        assert decide(keyed, Scope.INFERENCE, None, remote)[0] is Verdict.NO_KEY  # loopback too
        assert decide(keyed, Scope.INFERENCE, "wrong", remote)[0] is Verdict.UNKNOWN_KEY
        assert decide(keyed, Scope.INFERENCE, INFER_TEXT, remote) == (Verdict.ALLOW, INFER)
        assert decide(keyed, Scope.ADMIN, INFER_TEXT, remote) == (Verdict.SCOPE_TOO_SMALL, INFER)
        assert decide(keyed, Scope.ADMIN, ADMIN_TEXT, remote) == (Verdict.ALLOW, ADMIN)
        assert decide(keyed, Scope.INFERENCE, ADMIN_TEXT, remote) == (Verdict.ALLOW, ADMIN)  # admin includes it
    assert {v.status for v in Verdict} == {200, 401, 403}


def test_scopes_without_keys():
    on_loopback, everywhere = Policy(listen="127.0.0.1"), Policy(listen="0.0.0.0")
    opened = Policy(listen="0.0.0.0", open_admin=True)
    assert decide(on_loopback, Scope.ADMIN, None, client_local=False)[0] is Verdict.ALLOW
    assert decide(everywhere, Scope.ADMIN, None, client_local=True)[0] is Verdict.ALLOW
    assert decide(everywhere, Scope.ADMIN, None, client_local=False)[0] is Verdict.LOCAL_ONLY
    assert decide(everywhere, Scope.ADMIN, "anything", client_local=False)[0] is Verdict.LOCAL_ONLY
    assert decide(everywhere, Scope.INFERENCE, None, client_local=False)[0] is Verdict.ALLOW
    assert decide(opened, Scope.ADMIN, None, client_local=False)[0] is Verdict.ALLOW


def test_the_presented_key():
    assert presented_key("Bearer abc", None) == "abc" and presented_key("bearer  abc ", None) == "abc"
    assert presented_key(None, "abc") == "abc" and presented_key("Bearer a", "b") == "a"
    assert presented_key("Basic dXNlcg==", None) == "Basic dXNlcg=="  # matches no key: a 401
    assert presented_key(None, None) is None


def test_startup_warnings():
    assert startup_warnings(Policy(listen="127.0.0.1"), 1) == []
    assert startup_warnings(Policy(KEYS, listen="0.0.0.0"), 1) == []
    plain = ApiKey("app", Scope.INFERENCE, digest(INFER_TEXT), plaintext=True)
    [warning] = startup_warnings(Policy((plain,), listen="0.0.0.0"), 1)
    assert "plaintext (app)" in warning and INFER_TEXT not in warning
    [open_] = startup_warnings(Policy(listen="0.0.0.0"), 52415)
    assert open_.startswith("THE API IS OPEN") and "0.0.0.0:52415" in open_ and "only this machine" in open_
    assert "AND administer" in startup_warnings(Policy(listen="0.0.0.0", open_admin=True), 1)[0]


# ---- limits -------------------------------------------------------------------------------------

def test_stream_slots_count_across_holders_and_free_with_them(tmp_path):
    slots = StreamSlots(tmp_path, 2)
    one, two = slots.acquire("key:a"), slots.acquire("key:a")
    assert one and two and slots.acquire("key:a") is None
    assert slots.acquire("key:b") is not None  # another bucket
    one()
    one()  # once only
    three = slots.acquire("key:a")
    assert three is not None and slots.acquire("key:a") is None
    # another process (a gunicorn worker) holds slot 1 of bucket c: its death, not a release, frees it
    ours = StreamSlots(tmp_path, 2)
    assert ours.acquire("key:c") is not None  # slot 0
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()"),
        str(ours.folder("key:c") / "1")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert ours.acquire("key:c") is None
        holder.kill()
        holder.wait(timeout=10)
        assert ours.acquire("key:c") is not None
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert bucket_of("ops", "1.2.3.4") == "key:ops" and bucket_of(None, "1.2.3.4") == "addr:1.2.3.4"


def test_a_stream_ends_when_its_client_stops_reading():
    server, client = socket.socketpair()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    released, closed = [], []

    def parts():
        try:
            while True:
                yield b"x" * 1024
        finally:
            closed.append(True)

    server.setblocking(False)
    stream = WatchedStream(parts(), server, 0.2, lambda: released.append(True), "test")
    written = 0
    for part in stream:  # nobody reads `client`: the buffer fills, then the stream stops
        try:
            written += server.send(part)
        except BlockingIOError:
            pass
        assert written < 10_000_000
    stream.close()
    assert released == [True] and closed == [True]
    with pytest.raises(OSError):
        server.send(b"more")  # shut down: the server's last writes fail at once
    server.close()
    client.close()


class Echo:
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"got": json_body(req)}


class Streams:
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.stream = iter([b"a", b"b"])


def app(tmp_path: Path, keys: tuple[ApiKey, ...] = KEYS, listen: str = "0.0.0.0",
        **limits) -> falcon.testing.TestClient:
    from skulk.services.api.http.errors import serialize_error
    application = falcon.App(middleware=[
        AuthMiddleware(Policy(keys, listen=listen), {"/admin": Scope.ADMIN, "/v1/messages": Scope.INFERENCE,
                                                       "/gen": Scope.INFERENCE, "/health": Scope.PUBLIC}),
        LimitsMiddleware(Limits(streams_root=tmp_path, **limits), {("/gen", "POST"): True})])
    application.set_error_serializer(serialize_error)
    for path in ("/admin", "/v1/messages", "/health"):
        application.add_route(path, Echo())
    application.add_route("/gen", Streams())
    return falcon.testing.TestClient(application)


def test_the_middleware_answers_in_each_clients_shape(tmp_path):
    c = app(tmp_path)
    bearer = {"Authorization": f"Bearer {INFER_TEXT}"}
    assert c.simulate_post("/health", json={}).status_code == 200
    missing = c.simulate_post("/admin", json={})
    assert missing.status_code == 401 and missing.json == error_body("/admin", 401, missing.json["error"]["message"])
    assert missing.headers["www-authenticate"] == 'Bearer realm="skulk"'
    anthropic = c.simulate_post("/v1/messages", json={})
    assert anthropic.status_code == 401 and anthropic.json["error"]["type"] == "authentication_error"
    assert c.simulate_post("/v1/messages", json={}, headers={"x-api-key": INFER_TEXT}).status_code == 200
    small = c.simulate_post("/admin", json={}, headers=bearer)
    assert small.status_code == 403 and "scope inference" in small.json["error"]["message"]
    assert c.simulate_post("/admin", json={}, headers={"Authorization": f"Bearer {ADMIN_TEXT}"}).status_code == 200
    assert c.simulate_options("/admin").status_code == 200  # CORS preflights carry no key
    remote = app(tmp_path, keys=()).simulate_post("/admin", json={}, remote_addr="192.0.2.9")
    assert remote.status_code == 403 and "api.open_admin: true" in remote.json["error"]["message"]
    assert app(tmp_path, keys=()).simulate_post("/admin", json={}).status_code == 200  # from loopback


def test_body_size_and_streams_per_key(tmp_path):
    c = app(tmp_path, max_body_bytes=100, max_streams_per_key=1)
    admin = {"Authorization": f"Bearer {ADMIN_TEXT}"}
    big = c.simulate_post("/admin", body=b"[" + b"1," * 100 + b"1]", headers=admin)
    assert big.status_code == 413 and "100 bytes" in big.json["error"]["message"]
    assert c.simulate_post("/admin", json=[1], headers=admin).json == {"got": [1]}
    # a whole answer frees its slot at once; the test client reads (and closes) the streamed one
    assert c.simulate_post("/gen", headers=admin).status_code == 200
    assert c.simulate_post("/gen", headers=admin).status_code == 200
    held = StreamSlots(tmp_path, 1).acquire(bucket_of("ops", ""))
    assert held is not None
    refused = c.simulate_post("/gen", headers=admin)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert "'ops'" in refused.json["error"]["message"] and ADMIN_TEXT not in refused.text
    assert c.simulate_post("/gen", headers={"Authorization": f"Bearer {INFER_TEXT}"}).status_code == 200
    held()
    assert c.simulate_post("/gen", headers=admin).status_code == 200


def test_without_keys_the_clusters_other_nodes_may_read_admin_routes(tmp_path):
    from skulk.services.api.links.peers import FORWARDED
    application = falcon.App(middleware=[AuthMiddleware(Policy(listen="0.0.0.0"), {"/admin": Scope.ADMIN},
                                                        lambda: frozenset({"192.0.2.7"}))])
    application.add_route("/admin", Echo())
    c = falcon.testing.TestClient(application)
    assert c.simulate_post("/admin", json={}, remote_addr="192.0.2.7").status_code == 200  # a peer node
    assert c.simulate_post("/admin", json={}, remote_addr="::ffff:192.0.2.7").status_code == 200
    assert c.simulate_post("/admin", json={}, remote_addr="192.0.2.9").status_code == 403

    class Forwarded:
        def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
            resp.media = FORWARDED.get()

    keyed = falcon.App(middleware=[AuthMiddleware(Policy(KEYS, listen="0.0.0.0"), {"/f": Scope.ADMIN},
                                                  lambda: frozenset({"192.0.2.7"}))])
    keyed.add_route("/f", Forwarded())
    k = falcon.testing.TestClient(keyed)
    assert k.simulate_get("/f", remote_addr="192.0.2.7").status_code == 401  # with keys, no node is trusted
    answer = k.simulate_get("/f", headers={"x-api-key": ADMIN_TEXT})
    assert answer.json == {"Authorization": f"Bearer {ADMIN_TEXT}"}  # what the cluster views send to peers


def test_a_client_at_any_of_the_machines_own_addresses_is_on_this_machine():
    def served(remote: str, own: frozenset[str]) -> int:
        application = falcon.App(middleware=[AuthMiddleware(Policy(listen="0.0.0.0"), {"/admin": Scope.ADMIN},
                                                            own_addresses=lambda: own)])
        application.add_route("/admin", Echo())
        return falcon.testing.TestClient(application).simulate_post("/admin", json={}, remote_addr=remote).status_code

    mine = frozenset({"10.0.0.7", "fe80::1"})
    assert served("10.0.0.7", mine) == 200  # its own LAN address, dialled from this machine
    assert served("::ffff:10.0.0.7", mine) == 200
    assert served("10.0.0.8", mine) == 403  # another machine on the LAN
    assert served("10.0.0.7", frozenset()) == 403  # once the address has left this machine
