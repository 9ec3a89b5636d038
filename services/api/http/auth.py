"""Who may call which route: API keys with two scopes, and a safe default without keys.

Each route declares the scope it needs (`Route.scope` in `routes.py`: public, inference or
admin). With `api.keys` configured every non-public route needs a key (`Authorization: Bearer
<key>`, or `x-api-key: <key>` as the Anthropic SDK sends it): none or an unknown one is a 401,
one whose scope is too small a 403. Without keys, a node listening on loopback serves everyone
who can reach it (only this machine's clients); a node listening on another address still
serves inference to all, but admin routes only to clients on this machine (loopback, or any of
the machine's own addresses: a client there connects from the address it dialled) and to the
cluster's other nodes (their cluster views ask this node's diagnostics and traces) unless the
operator sets `api.open_admin: true`. The decision is `decide` (pure); `AuthMiddleware` applies
it, and hands the caller's key on to the peers a cluster view asks (`peers.FORWARDED`).

A key's text never appears in a log line, an error message or anything this module keeps: keys
are compared as SHA-256 digests (`node/api_keys.py`) and named by their `name`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import falcon

from skulk.node.addresses import is_loopback, machine_addresses, plain_address
from skulk.node.api_keys import ApiKey, Scope, find
from skulk.services.api.links.peers import FORWARDED

log = logging.getLogger("skulk.api.auth")


class Verdict(Enum):
    ALLOW = "allow"
    NO_KEY = "no_key"  # 401
    UNKNOWN_KEY = "unknown_key"  # 401
    SCOPE_TOO_SMALL = "scope_too_small"  # 403: an inference key on an admin route
    LOCAL_ONLY = "local_only"  # 403: no keys, non-loopback listen, admin route, client not local

    @property
    def status(self) -> int:
        return STATUS.get(self, 200)


STATUS = {Verdict.NO_KEY: 401, Verdict.UNKNOWN_KEY: 401, Verdict.SCOPE_TOO_SMALL: 403, Verdict.LOCAL_ONLY: 403}


@dataclass(frozen=True)
class Policy:
    """The node's keys and how it listens (read once, at the API's start)."""

    keys: tuple[ApiKey, ...] = ()
    open_admin: bool = False
    listen: str = "127.0.0.1"

    @property
    def on_loopback(self) -> bool:
        return is_loopback(self.listen)


def presented_key(authorization: str | None, x_api_key: str | None) -> str | None:
    """The key a request carries: `Authorization: Bearer <key>` first, then `x-api-key`. Any
    other Authorization scheme counts as a key that matches nothing (a 401, never a pass)."""
    if authorization:
        scheme, _, rest = authorization.strip().partition(" ")
        return rest.strip() if scheme.lower() == "bearer" else authorization
    return x_api_key.strip() if x_api_key else None


def decide(policy: Policy, needed: Scope, presented: str | None, client_local: bool) -> tuple[Verdict, ApiKey | None]:
    """Whether a request may call a route needing `needed`, and with which configured key.
    `client_local`: the client is on this machine (loopback) or is another node of the cluster."""
    if needed is Scope.PUBLIC:
        return Verdict.ALLOW, None
    if policy.keys:
        if presented is None:
            return Verdict.NO_KEY, None
        key = find(policy.keys, presented)
        if key is None:
            return Verdict.UNKNOWN_KEY, None
        return (Verdict.ALLOW if key.grants(needed) else Verdict.SCOPE_TOO_SMALL), key
    if needed is Scope.ADMIN and not (policy.on_loopback or policy.open_admin or client_local):
        return Verdict.LOCAL_ONLY, None
    return Verdict.ALLOW, None


def refusal(verdict: Verdict, needed: Scope, key: ApiKey | None, listen: str) -> str:
    """What a refused client is told (never a key; a key's name is not a secret)."""
    if verdict is Verdict.NO_KEY:
        return ("this route needs an API key: send it as `Authorization: Bearer <key>` "
                "(or `x-api-key: <key>`)")
    if verdict is Verdict.UNKNOWN_KEY:
        return "the API key is not valid for this node"
    if verdict is Verdict.SCOPE_TOO_SMALL:
        return f"the API key {key.name if key else ''!r} has scope inference; this route needs {needed.value}"
    return (f"admin routes of a node listening on {listen} without API keys answer only clients on "
            "the node's own machine and the cluster's nodes: configure `api.keys` (an admin key) in "
            "skulk.yaml, or set `api.open_admin: true` to let every client that reaches the node "
            "administer it")


def startup_warnings(policy: Policy, port: int) -> list[str]:
    """What the API says once at start about how open it is (WARNING lines)."""
    out = []
    plain = [k.name for k in policy.keys if k.plaintext]
    if plain:
        out.append(f"api.keys: {len(plain)} key(s) stored in plaintext ({', '.join(plain)}); store "
                   "`key_sha256` instead (`printf %s KEY | sha256sum`, docs/operations.md)")
    if not policy.keys and not policy.on_loopback:
        who = ("anyone who can reach it may run inference AND administer the cluster (api.open_admin: true)"
               if policy.open_admin else "anyone who can reach it may run inference; admin routes answer "
               "only this machine's clients and the cluster's nodes")
        out.append(f"THE API IS OPEN: listening on {policy.listen}:{port} without api.keys; {who}. "
                   "Configure api.keys to close it (docs/operations.md, 'Securing a node').")
    return out


class AuthMiddleware:
    """Applies `decide` to every routed request, before its responder (and before its body is
    read). The matched key, if any, is left in `req.context.api_key` for the stream limits."""

    def __init__(self, policy: Policy, scopes: Mapping[str, Scope],
                 other_nodes: Callable[[], frozenset[str]] = frozenset,
                 own_addresses: Callable[[], frozenset[str]] = machine_addresses) -> None:
        self.policy = policy
        self.scopes = scopes  # by path template (every alias listed)
        self.other_nodes = other_nodes  # the addresses the cluster's other nodes advertise (from the state)
        self.own_addresses = own_addresses

    def _local(self, address: str) -> bool:
        """This machine (at any of its addresses), or another node of the cluster (asked only
        where it matters: no keys)."""
        if is_loopback(address) or plain_address(address) in self.own_addresses():
            return True
        return not self.policy.keys and plain_address(address) in self.other_nodes()

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: Any,
                         params: dict[str, Any]) -> None:
        req.context.api_key = None
        FORWARDED.set({})  # this thread served other requests before: nothing of theirs is passed on
        if req.method == "OPTIONS":  # a browser's CORS preflight carries no credentials
            return
        needed = self.scopes.get(req.uri_template or "", Scope.ADMIN)
        presented = presented_key(req.get_header("Authorization"), req.get_header("X-Api-Key"))
        local = needed is Scope.ADMIN and self._local(req.remote_addr or "")  # (only admin asks)
        verdict, key = decide(self.policy, needed, presented, local)
        req.context.api_key = key
        if presented is not None and key is not None:
            FORWARDED.set({"Authorization": f"Bearer {presented}"})
        if verdict is Verdict.ALLOW:
            return
        log.info("refused %s %s from %s: %s%s", req.method, req.path, req.remote_addr, verdict.value,
                 f" (key {key.name!r})" if key else "")
        headers = {"WWW-Authenticate": 'Bearer realm="skulk"'} if verdict.status == 401 else None
        raise falcon.HTTPError(verdict.status, description=refusal(verdict, needed, key, self.policy.listen),
                               headers=headers)
