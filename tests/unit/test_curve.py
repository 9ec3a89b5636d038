"""CurveZMQ with the cluster key (wire/curve.py): key files, a keyed server admits only keyed
clients, and during a rotation a client on either key file reaches a server on the other."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import pytest
import zmq

from skulk.wire import curve
from skulk.wire.sockets import make_socket

READ_MS = 30_000
"""How long a keyed client's message may take to arrive (a handshake on loopback: milliseconds on
an idle machine; the ZAP handler's thread may wait long for a core on a busy one)."""
SILENT_MS = 1500
"""How long a refused client is watched for a message that must never arrive."""


@pytest.fixture(autouse=True)
def no_keys_after():
    yield
    curve.configure(None)


def keys(tmp_path, name: str, n: int = 1, base: curve.ClusterKeys | None = None) -> curve.ClusterKeys:
    content = curve.keygen()
    extra = [{"public": k.public.decode(), "secret": k.secret.decode()} for k in (base.keys if base else ())]
    content["keys"] = extra + content["keys"] if base else content["keys"] * 1
    for _ in range(n - 1):
        content["keys"] += curve.keygen()["keys"]
    path = tmp_path / name
    curve.write_key_file(path, content)
    return curve.load_key_file(path)


def server(ctx: zmq.Context[Any], which: curve.ClusterKeys | None) -> tuple[zmq.Socket[Any], str]:
    curve.configure(which)
    sock = make_socket(ctx, zmq.ROUTER, bind="tcp://127.0.0.1:*")
    return sock, sock.getsockopt(zmq.LAST_ENDPOINT).decode()


def got(sock: zmq.Socket[Any], ms: int) -> list[bytes] | None:
    return sock.recv_multipart() if sock.poll(ms) else None


def close(server_ctx: zmq.Context[Any], client_ctx: zmq.Context[Any]) -> None:
    """The server's ZAP handler and watchers stopped, then both contexts ended with every socket
    dropped at once: a failed assertion leaves sockets open with unsent messages, and `term()`
    would wait for those forever."""
    curve.release(server_ctx)
    server_ctx.destroy(linger=0)
    client_ctx.destroy(linger=0)


def test_key_files_are_checked(tmp_path):
    good = keys(tmp_path, "k.json")
    assert len(good.current.public) == 40 and good.publics == {good.current.public}
    with pytest.raises(FileExistsError):
        curve.write_key_file(tmp_path / "k.json", curve.keygen())
    assert (tmp_path / "k.json").stat().st_mode & 0o777 == 0o600
    for name, text in (("a", "{"), ("b", '{"version": 1, "keys": []}'),
                       ("c", json.dumps({"version": 1, "keys": [{"public": "x" * 40, "secret": "y" * 40}]}))):
        (tmp_path / name).write_text(text)
        with pytest.raises(curve.KeyFileError):
            curve.load_key_file(tmp_path / name)
    other = curve.keygen()["keys"][0]
    mixed = {"version": 1, "keys": [{"public": other["public"], "secret": good.current.secret.decode()}]}
    (tmp_path / "d").write_text(json.dumps(mixed))
    with pytest.raises(curve.KeyFileError, match="not the secret's"):
        curve.load_key_file(tmp_path / "d")


def test_a_keyed_server_reads_only_keyed_clients(tmp_path):
    cluster, stranger = keys(tmp_path, "cluster.json"), keys(tmp_path, "stranger.json")
    sctx, cctx = zmq.Context(), zmq.Context()
    try:
        srv, endpoint = server(sctx, cluster)
        curve.configure(cluster)
        member = make_socket(cctx, zmq.DEALER, connect=endpoint)
        member.send(b"from a member")
        assert got(srv, READ_MS)[-1] == b"from a member"

        refused = curve.refusals.count
        plain = cctx.socket(zmq.DEALER)  # no CURVE at all
        plain.connect(endpoint)
        wrong = cctx.socket(zmq.DEALER)  # CURVE with the server's public key but a key not in the file
        wrong.curve_secretkey, wrong.curve_publickey = stranger.current.secret, stranger.current.public
        wrong.curve_serverkey = cluster.current.public
        wrong.connect(endpoint)
        for s in (plain, wrong):
            with contextlib.suppress(zmq.Again):  # the server may have refused its link already: no pipe
                s.send(b"let me in", zmq.NOBLOCK)
        assert got(srv, SILENT_MS) is None
        deadline = time.monotonic() + READ_MS / 1000
        while curve.refusals.count < refused + 2:  # both handshakes were turned away (logged or counted)
            assert time.monotonic() < deadline, curve.refusals.count - refused
            assert got(srv, 50) is None  # the server's own poll: still nothing from either
        for s in (member, plain, wrong):
            s.close(0)
        srv.close(0)
    finally:
        close(sctx, cctx)


def test_during_a_rotation_either_side_may_have_switched(tmp_path):
    old = keys(tmp_path, "old.json")
    both = keys(tmp_path, "both.json", base=old)  # [old, new]: old current, new accepted
    new_first = curve.ClusterKeys((both.keys[1], both.keys[0]))  # [new, old]: switched
    for server_keys, client_keys in ((both, new_first), (new_first, both)):
        sctx, cctx = zmq.Context(), zmq.Context()
        try:
            srv, endpoint = server(sctx, server_keys)
            curve.configure(client_keys)
            client = make_socket(cctx, zmq.DEALER, connect=endpoint)
            client.send(b"hello across the rotation")  # waits (bounded) for the handshake that works
            assert got(srv, READ_MS)[-1] == b"hello across the rotation"
            client.close(0)
            srv.close(0)
        finally:
            close(sctx, cctx)


def test_a_redialling_probe_does_not_wait_for_a_server_that_is_not_listening(tmp_path):
    """Gossip and the masters' links probe inside loops that must keep beating: a refused port
    ends the probe at once (the link is re-made when its handshake fails later); a listening
    server's key is still found, whichever of the file's keys it presents."""
    import socket
    import time

    old = keys(tmp_path, "old.json")
    both = keys(tmp_path, "both.json", base=old)
    new_first = curve.ClusterKeys((both.keys[1], both.keys[0]))
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        closed = f"tcp://127.0.0.1:{free.getsockname()[1]}"  # bound, never listening: refused
        ctx = zmq.Context()
        try:
            t0 = time.monotonic()
            assert curve.probe_server_key(ctx, closed, both, 2.0, give_up_refused=True) == both.current.public
            assert time.monotonic() - t0 < 2.0  # a patient probe would wait 2 s per key
        finally:
            ctx.destroy(linger=0)
    sctx, cctx = zmq.Context(), zmq.Context()
    try:
        srv, endpoint = server(sctx, new_first)
        presented = curve.probe_server_key(cctx, endpoint, both, curve.REDIAL_PROBE_S * 8, give_up_refused=True)
        assert presented == new_first.current.public
        srv.close(0)
    finally:
        close(sctx, cctx)


def test_the_store_token_is_made_only_with_the_key(tmp_path):
    assert curve.store_headers() == {} and curve.store_authorized(None)  # no key: an open store
    old = keys(tmp_path, "old.json")
    curve.configure(old)
    header = curve.store_headers()["Authorization"]
    assert curve.store_authorized(header) and not curve.store_authorized(None)
    assert not curve.store_authorized("Bearer " + "0" * 64)
    curve.configure(keys(tmp_path, "both.json", base=old))  # a rotation accepts the old token too
    assert curve.store_authorized(header)
    curve.configure(keys(tmp_path, "other.json"))
    assert not curve.store_authorized(header)
