"""CurveZMQ on every socket that crosses nodes: only holders of the cluster key join, read or
inject.

The cluster key file (`skulk cluster keygen --out FILE`) holds CURVE keypairs: the first is
`current`, the others are `accepted`. Every TCP socket a process makes (`wire.sockets.
make_socket`) is secured here when the process was given a key file (`ChildArgs.key_file`,
from the node's `cluster.key_file`): a ROUTER that binds is a CURVE server with the
current keypair, and a ZAP handler admits only clients whose long-term key is one of the file's
(a CURVE client proves it holds the secret of the key it presents); a socket that connects is a
CURVE client with the current keypair. Node-local IPC sockets are never secured (the node's
run dir is private to its user). A client without the key cannot complete a handshake: nothing
it sends is read, nothing is sent to it. Refusals are logged once per peer address, then only
counted (a scanner must not fill the log).

Rotation without downtime: give every node a file with the new key added as accepted (servers
then admit clients using either key), then a file with the new key first and the old one
accepted; a client whose handshake with the current key fails keeps trying the accepted ones
(one connection per key, `ZMQ_IMMEDIATE` so messages go only to a connection that completed),
so nodes on either file talk while the files are swapped; finally drop the old key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.utils.z85
from zmq.utils.monitor import recv_monitor_message

log = logging.getLogger("skulk.curve")

KEY_FILE_VERSION = 1
ZAP_DOMAIN = "skulk"
MAX_REMEMBERED = 1024
"""Peers whose first refusal was logged; past this, refusals are only counted."""
PROBE_S = 1.0
"""How long a rotation's probe waits for one key's handshake with a server (loopback or LAN:
milliseconds)."""


class KeyFileError(ValueError):
    """The key file is missing, unreadable or malformed (the message says which)."""


@dataclass(frozen=True)
class Keypair:
    public: bytes  # z85, 40 bytes
    secret: bytes


@dataclass(frozen=True)
class ClusterKeys:
    keys: tuple[Keypair, ...]  # the first is current

    @property
    def current(self) -> Keypair:
        return self.keys[0]

    @property
    def publics(self) -> frozenset[bytes]:
        return frozenset(k.public for k in self.keys)


def keygen() -> dict[str, Any]:
    public, secret = zmq.curve_keypair()
    return {"version": KEY_FILE_VERSION, "keys": [{"public": public.decode(), "secret": secret.decode()}]}


def write_key_file(path: Path, content: dict[str, Any]) -> None:
    """Written readable by its owner only (it is the cluster's secret)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(content, fh, indent=2)
        fh.write("\n")


def _z85_key(value: Any, where: str) -> bytes:
    if not isinstance(value, str) or len(value) != 40:
        raise KeyFileError(f"{where}: a key is 40 characters of Z85")
    try:
        zmq.utils.z85.decode(value)
    except (ValueError, KeyError):
        raise KeyFileError(f"{where}: not Z85") from None
    return value.encode()


def load_key_file(path: Path) -> ClusterKeys:
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read the cluster key file: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise KeyFileError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != KEY_FILE_VERSION or not isinstance(doc.get("keys"), list) \
            or not doc["keys"]:
        raise KeyFileError(f"{path}: expected {{\"version\": 1, \"keys\": [{{\"public\", \"secret\"}}, ...]}}")
    keys = []
    for i, entry in enumerate(doc["keys"]):
        if not isinstance(entry, dict) or set(entry) != {"public", "secret"}:
            raise KeyFileError(f"{path}: keys[{i}] must have exactly `public` and `secret`")
        pair = Keypair(_z85_key(entry["public"], f"{path}: keys[{i}].public"),
                       _z85_key(entry["secret"], f"{path}: keys[{i}].secret"))
        if zmq.curve_public(pair.secret) != pair.public:
            raise KeyFileError(f"{path}: keys[{i}]: the public key is not the secret's")
        keys.append(pair)
    return ClusterKeys(tuple(keys))


_active: ClusterKeys | None = None
_authenticators: dict[int, Any] = {}  # by context: a ThreadAuthenticator (`_authenticator`)
_watchers: dict[int, list[tuple[zmq.Socket[Any], threading.Thread]]] = {}  # by context
_lock = threading.Lock()


def configure(keys: ClusterKeys | None) -> None:
    """This process's cluster keys (None: sockets stay open, as on a loopback-only node)."""
    global _active
    _active = keys


def active() -> ClusterKeys | None:
    return _active


def rotating() -> bool:
    """More than one key in this process's file: a rotation is under way, and a peer may present
    any of them (a link that fails its handshake is worth dialling again, with a probe)."""
    return _active is not None and len(_active.keys) > 1


def _authenticator(ctx: zmq.Context[Any], keys: ClusterKeys) -> Any:
    """A started ZAP handler that admits a CURVE client whose long-term key is one of the
    cluster's; a refusal is logged once per peer address. pyzmq's authenticator runs asyncio:
    imported here, by keyed nodes only, so no role pays for it at every start otherwise."""
    import zmq.auth.thread

    class Authenticator(zmq.auth.thread.ThreadAuthenticator):
        def __init__(self) -> None:
            super().__init__(ctx, log=logging.getLogger("skulk.curve.zap"))
            self.address = ""

        async def handle_zap_message(self, msg: list[bytes]) -> None:
            self.address = msg[3].decode(errors="replace") if len(msg) > 3 else ""
            await super().handle_zap_message(msg)

        def callback(self, domain: str, key: bytes) -> bool:
            allowed = key in keys.publics
            if not allowed:
                refusals.note("its key is not in the cluster key file", self.address)
            return allowed

    auth = Authenticator()
    auth.start()
    auth.configure_curve_callback(domain=ZAP_DOMAIN, credentials_provider=auth)
    return auth


def _ensure_authenticator(ctx: zmq.Context[Any], keys: ClusterKeys) -> None:
    with _lock:
        if id(ctx) in _authenticators:
            return
        _authenticators[id(ctx)] = _authenticator(ctx, keys)


def release(ctx: zmq.Context[Any]) -> None:
    """Stop the context's refusal watchers and ZAP handler, before `ctx.term()`/`destroy()`:
    their threads use sockets of the context, and closing those under them aborts libzmq."""
    with _lock:
        auth = _authenticators.pop(id(ctx), None)
        watched = _watchers.pop(id(ctx), [])
    for sock, thread in watched:
        try:
            sock.disable_monitor()
        except zmq.ZMQError:
            pass  # the socket is closed already: its monitor stopped with it
        thread.join(1.0)
    if auth is not None:
        auth.stop()


def secure_server(sock: zmq.Socket[Any]) -> None:
    keys = _active
    if keys is None:
        return
    _ensure_authenticator(sock.context, keys)
    sock.curve_secretkey = keys.current.secret
    sock.curve_publickey = keys.current.public
    sock.curve_server = True
    sock.zap_domain = ZAP_DOMAIN.encode()
    sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)  # no ZAP handler (it died, or is gone) admits nobody
    _watch_refusals(sock)


def secure_client(sock: zmq.Socket[Any], server_key: bytes | None = None) -> None:
    keys = _active
    if keys is None:
        return
    sock.curve_secretkey = keys.current.secret
    sock.curve_publickey = keys.current.public
    sock.curve_serverkey = server_key or keys.current.public


def connect(sock: zmq.Socket[Any], endpoint: str, redials: bool = False) -> None:
    """Connect a client socket. During a rotation (more than one key in the file) the server may
    present any of them: a short probe finds the one it holds first (`probe_server_key`), so the
    real socket has one connection with ordinary ZeroMQ semantics. A peer that switches later
    fails its handshakes; the roles drop and re-make a link that stopped working, which probes
    again. `redials`: the caller re-makes this link when its handshake fails (`redial_due`), so
    the probe does not wait for a server that is not listening (yet), and waits less for one
    that does not answer: it runs in a loop that must keep its peers' liveness (gossip's hellos,
    the master's announces)."""
    keys = _active
    if keys is None or not endpoint.startswith("tcp://"):  # node-local IPC stays plain
        sock.connect(endpoint)
        return
    server_key = None
    if len(keys.keys) > 1:
        server_key = probe_server_key(sock.context, endpoint, keys, REDIAL_PROBE_S, give_up_refused=True) \
            if redials else probe_server_key(sock.context, endpoint, keys)
    secure_client(sock, server_key)
    sock.connect(endpoint)


_HANDSHAKE = zmq.EVENT_HANDSHAKE_SUCCEEDED
HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                    | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
"""What a client socket's monitor reports when the server refused its handshake."""
REDIAL_MIN_S = 1.0
"""Least time between two re-dials of one link (a stranger's port refuses every key)."""
REDIAL_PROBE_S = 0.25
"""A redialling caller's probe per key: a handshake on a LAN takes milliseconds, and its loop
must keep beating (gossip says hello every 0.25 s; a peer silent for 1.5 s is gone)."""


def redial_due(rotating: bool, last: float | None, now: float) -> bool:
    """Whether a dialled link whose handshake just failed is re-made: closed, then dialled again,
    probing the key its server presents (pure). Only during a rotation (`rotating()`): the peer
    restarted onto another current key, or was not listening yet when it was probed, and zmq's
    own reconnects would present the stale server key forever (a link the role keeps, such as a
    bootstrap peer's, would never carry a message again). With one key there is nothing else
    to try."""
    return rotating and (last is None or now - last >= REDIAL_MIN_S)


def probe_server_key(ctx: Any, endpoint: str, keys: ClusterKeys, timeout_s: float = PROBE_S,
                     give_up_refused: bool = False) -> bytes:
    """The file's key this endpoint's server presents (the current one when none answers in
    time: a peer that is down is not a reason to wait longer). `give_up_refused`: a refused
    connection (nothing listens there) ends the probe at once, with the current key."""
    for pair in keys.keys:
        probe = ctx.socket(zmq.DEALER)
        probe.setsockopt(zmq.LINGER, 0)
        monitor = probe.get_monitor_socket(_HANDSHAKE | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                           | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
                                           | zmq.EVENT_DISCONNECTED
                                           | (zmq.EVENT_CONNECT_RETRIED if give_up_refused else 0))
        try:
            secure_client(probe, pair.public)
            probe.connect(endpoint)
            event = recv_monitor_message(monitor)["event"] if monitor.poll(int(timeout_s * 1000)) else None
            if event == _HANDSHAKE:
                return pair.public
            if event == zmq.EVENT_CONNECT_RETRIED:
                break  # refused: nobody listens there (yet); the caller redials when it fails
        finally:
            probe.disable_monitor()
            monitor.close(0)
            probe.close(0)
    return keys.current.public


class Refusals:
    """Handshakes refused, logged once per peer address and counted after that."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.count = 0
        self.lock = threading.Lock()

    def note(self, why: str, address: str) -> None:
        with self.lock:
            self.count += 1
            first = address not in self.seen and len(self.seen) < MAX_REMEMBERED
            if first:
                self.seen.add(address)  # bounded: a scan from many addresses stops logging
        if first:
            log.warning("refused a peer%s: %s (further refusals from it are only counted)",
                        f" at {address}" if address else "", why)


refusals = Refusals()

_FAILED: dict[int, str] = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake failed",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "not a CurveZMQ client of this cluster (wrong or no cluster key)"}
"""What the monitor reports: handshakes that never reached ZAP (no key, or not this server's key).
The monitor knows only the listening address; a key ZAP refuses is logged by ZAP, with the peer's."""


def _watch_refusals(sock: zmq.Socket[Any]) -> None:
    """A thread reading the socket's monitor for failed handshakes (the loop never sees them)."""
    events = zmq.EVENT_MONITOR_STOPPED
    for event in _FAILED:
        events |= event
    monitor = sock.get_monitor_socket(events)

    def run() -> None:
        try:
            while True:
                try:
                    event = recv_monitor_message(monitor)
                except zmq.ZMQError:
                    return  # the context is ending
                if event["event"] == zmq.EVENT_MONITOR_STOPPED:
                    return  # the socket closed
                why = _FAILED.get(event["event"])
                if why is not None:
                    refusals.note(why, (event.get("endpoint") or b"").decode(errors="replace"))
        finally:
            monitor.close(0)

    thread = threading.Thread(target=run, name="curve-refusals", daemon=True)
    thread.start()
    with _lock:
        _watchers.setdefault(id(sock.context), []).append((sock, thread))


STORE_TOKEN_LABEL = b"skulk-store-v1"


def _store_token(pair: Keypair) -> str:
    return hmac.new(zmq.utils.z85.decode(pair.secret), STORE_TOKEN_LABEL, hashlib.sha256).hexdigest()


def store_headers() -> dict[str, str]:
    """What a request to the model store's HTTP server carries: a token only key holders can
    make (the store's transfers are HTTP, so CurveZMQ cannot cover them). The token
    authenticates; it does not encrypt (weights are not secret; the token is replayable by
    whoever can sniff the link, which is why the store belongs on a trusted network)."""
    keys = _active
    return {"Authorization": f"Bearer {_store_token(keys.current)}"} if keys is not None else {}


def store_authorized(header: str | None) -> bool:
    """Whether a store request may be served: always without a cluster key; else its bearer
    token must be one of the file's keys' (a rotation accepts both)."""
    keys = _active
    if keys is None:
        return True
    given = (header or "").removeprefix("Bearer ").strip().encode("latin-1", "replace")
    return any(hmac.compare_digest(given, _store_token(pair).encode()) for pair in keys.keys)
