"""Property-based fuzzing of every route in a node's OpenAPI document (`GET /api/openapi.json`).

Schemathesis turns each operation's schemas into Hypothesis strategies: positive cases fit the
schemas, negative ones violate them (wrong types, missing fields, huge numbers, bad query and
path parameters). On top come raw requests no schema describes: non-JSON and deeply nested
bodies, very long strings, path traversal. The driver runs rounds over every operation (a few
examples per operation and mode, more in later rounds) until its time is up, and records every
response that breaks the pass rule: a 5xx whose body is not the error envelope of its path
(`services/api/http/errors.py`), a dropped connection or a request that hangs.

Two things are pinned so a run cannot end the node it tests: `POST /admin/restart` always names
a node that does not exist, and output budgets of 32..4096 tokens are cut to 32 (a round stays
bounded; budgets outside that range still go out, to be refused).
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TypeVar

import jsonschema
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hseed
from hypothesis.errors import Unsatisfiable
from schemathesis.core.result import Err, Ok
from schemathesis.generation import GenerationMode

from skulk.services.api.http.errors import ERROR_SCHEMAS, error_shape

TIMEOUT_S = 60.0
"""A request still unanswered after this long counts as hung."""
NO_NODE = "fuzz-no-such-node"
KEEPALIVE_S = 1.5
"""Below gunicorn's keep-alive (2 s): a connection idle longer may be closed as it is reused."""
BUDGET_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "num_predict")
BUDGET_CAP, BUDGET_CUT_ABOVE = 32, 4096
T = TypeVar("T")
E = TypeVar("E", bound=Exception)


@dataclass
class HttpCounts:
    requests: Counter[str] = field(default_factory=Counter)  # operation label -> requests
    statuses: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)  # what broke the pass rule
    internal: list[str] = field(default_factory=list)  # 500s in the envelope: unhandled exceptions

    def total(self) -> int:
        return sum(self.requests.values())


def verdict(path: str, status: int, body: bytes) -> str:
    """Why a response breaks the pass rule ("" when it does not): a 5xx must be the envelope."""
    if status < 500:
        return ""
    try:
        doc = json.loads(body)
        jsonschema.validate(doc, ERROR_SCHEMAS[error_shape(path)])
    except (ValueError, jsonschema.ValidationError) as exc:
        return f"{status} without the error envelope ({type(exc).__name__}): {body[:200]!r}"
    return ""


def _bounded(body: Any) -> Any:
    """Output budgets cut to BUDGET_CAP where they would make a long generation (see above)."""
    if isinstance(body, dict):
        body = dict(body)
        for key in BUDGET_KEYS:
            value = body.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and BUDGET_CAP < value <= BUDGET_CUT_ABOVE:
                body[key] = BUDGET_CAP
        if isinstance(body.get("options"), dict):
            body["options"] = _bounded(body["options"])
        if "messages" in body and not any(k in body for k in BUDGET_KEYS) and "options" not in body:
            body["max_tokens"] = BUDGET_CAP  # the default budget is the model's whole context
    return body


def _ok(result: Ok[T] | Err[E]) -> T:
    """An operation of the document; one it declares wrongly stops the fuzzer with schemathesis's reason."""
    if isinstance(result, Err):
        raise result.err()
    return result.ok()


class HttpFuzzer:
    def __init__(self, base_url: str, seed: int, counts: HttpCounts | None = None) -> None:
        self.base = base_url.rstrip("/")
        self.rng = random.Random(seed)
        self.counts = counts or HttpCounts()
        self.session = requests.Session()
        self.last_end, self.last = time.monotonic(), ""
        doc = self.session.get(f"{self.base}/api/openapi.json", timeout=TIMEOUT_S).json()
        self.schema = schemathesis.openapi.from_dict(doc)  # (from_url leaves out the document's own route)
        self.schema.config.generation.update(max_examples=1000)  # the driver bounds each run itself
        self.operations = [_ok(r) for r in self.schema.get_all_operations()]

    def send(self, label: str, method: str, path: str, **kw: Any) -> None:
        """One request; a failure is recorded, never raised (a run collects them all)."""
        self.counts.requests[label] += 1
        idle = time.monotonic() - self.last_end
        try:
            try:
                resp = self.session.request(method, self.base + path, timeout=TIMEOUT_S, **kw)
            except requests.ConnectionError:
                if idle < KEEPALIVE_S:
                    raise
                # the server may close a connection idle past its keep-alive as we reuse it (the
                # race every HTTP client retries): once more, on a fresh connection
                self.session.close()
                resp = self.session.request(method, self.base + path, timeout=TIMEOUT_S, **kw)
        except requests.Timeout:
            self.counts.failures.append(f"{label}: no answer within {TIMEOUT_S:.0f}s: {method} {path[:200]}")
            return
        except requests.RequestException as exc:
            self.counts.failures.append(f"{label}: {type(exc).__name__}: {exc}: {method} {path[:200]} "
                                        f"(after {self.last[:200]}, idle {idle:.1f}s)")
            self.session.close()
            return
        finally:
            self.last_end = time.monotonic()
            self.last = f"{method} {path} {str(kw.get('data'))[:100]}"
        self.counts.statuses[resp.status_code] += 1
        if resp.status_code == 500:  # an envelope, but an exception nobody handled: listed to look at
            self.counts.internal.append(f"{label}: {method} {path[:200]} body {str(kw.get('data'))[:200]} -> "
                                        f"{resp.content[:200]!r}")
        if why := verdict(path, resp.status_code, resp.content):
            self.counts.failures.append(f"{label}: {why}: {method} {path[:200]} body {str(kw.get('data'))[:300]}")

    def send_case(self, case: Any) -> None:
        op = case.operation
        if op.path == "/admin/restart":
            case.query = {**(case.query or {}), "node_id": NO_NODE}
        case.body = _bounded(case.body) if case.body is not None else case.body
        kwargs = case.as_transport_kwargs(base_url=self.base)
        method, url = kwargs.pop("method"), kwargs.pop("url")
        kwargs.pop("timeout", None)
        kwargs.pop("verify", None)
        kwargs.pop("cookies", None)
        self.send(f"{op.method.upper()} {op.path}", method, url.removeprefix(self.base), **kwargs)

    def round(self, examples: int, end: float) -> None:
        """Every operation, positive and negative, `examples` cases each (until `end`)."""
        ops = list(self.operations)
        self.rng.shuffle(ops)
        for op in ops:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                if time.monotonic() >= end:
                    return
                self._cases(op, mode, examples, end)
            self.raw(op)

    def _cases(self, op: Any, mode: GenerationMode, examples: int, end: float) -> None:
        strategy = op.as_strategy(generation_mode=mode)

        @settings(max_examples=examples, deadline=None, database=None, phases=(Phase.explicit, Phase.generate),
                  suppress_health_check=list(HealthCheck), print_blob=False)
        @hseed(self.rng.randrange(2**32))
        @given(strategy)
        def run(case: Any) -> None:
            if time.monotonic() < end:
                self.send_case(case)

        try:
            run()
        except Unsatisfiable:  # nothing to violate (an operation without parameters or body)
            pass
        except Exception as exc:  # noqa: BLE001 - a schema the generator cannot satisfy: noted, not fatal
            self.counts.failures.append(f"{op.method.upper()} {op.path}: generator error {type(exc).__name__}: "
                                        f"{str(exc)[:200]}")

    def raw(self, op: Any) -> None:
        """What no schema describes, at this operation's path: non-JSON, deep nesting, a huge
        string, traversal in its path parameters, unknown methods."""
        rng = self.rng
        label = f"{op.method.upper()} {op.path} (raw)"
        path = op.path
        for name in [p.name for p in op.path_parameters]:
            path = path.replace("{" + name + "}", rng.choice(("..%2F..%2Fetc%2Fpasswd", "%2e%2e", "..", "%00",
                                                             "a" * 5000, "%ff%fe", "skulk%2Fdemo-tiny")))
        method = op.method.upper()
        headers = {"Content-Type": rng.choice(("application/json", "text/plain", "application/x-www-form-urlencoded"))}
        depth = rng.choice((50, 1000, 100_000))
        bodies = (b"{", b"\xff\xfe\x00", b"[" * depth + b"]" * depth, b'{"a":' * depth + b"1" + b"}" * depth,
                  json.dumps({"model": "x" * 1_000_000}).encode(), b"null", b"1e999999", b'"\\ud800"',
                  json.dumps({"messages": [{"role": "user", "content": "hi"}] * 10_000}).encode())
        target = path + (f"?node_id={NO_NODE}" if op.path == "/admin/restart" else "")
        self.send(label, method, target, data=rng.choice(bodies), headers=headers)
        query = rng.choice(("?limit=-1", "?limit=99999999999999999999999", "?timeout=1e308&wait_after_idx=-5",
                            "?entries=%00", "?node_id=" + "x" * 10_000, "?" + "&".join(["a=b"] * 5000)))
        if op.path == "/admin/restart":  # this node is the one under test: name another
            query += f"&node_id={NO_NODE}"
        self.send(label, method, path + query)
        if rng.random() < 0.2:
            self.send(label, rng.choice(("PATCH", "OPTIONS", "TRACE", "PROPFIND")), target)


def fuzz_http(base_url: str, seconds: float, seed: int, counts: HttpCounts | None = None) -> HttpCounts:
    """Rounds over every route until `seconds` have passed (at least one whole round)."""
    fuzzer = HttpFuzzer(base_url, seed, counts)
    end = time.monotonic() + seconds
    fuzzer.round(1, float("inf"))  # every operation at least once, whatever the budget
    examples = 2
    while time.monotonic() < end:
        fuzzer.round(examples, end)
        examples = min(examples * 2, 50)
    return fuzzer.counts
