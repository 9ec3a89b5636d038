"""The chaos soak's judgements, as pure functions of what was observed (no sockets, no clock).

- `membership_problems`: every live node's `/state` names the same master and the same members,
  which are exactly the nodes that run.
- `agreement_problems`: the state's instances and runners agree with the processes that exist
  (every role once per node, a runner process for each runner the state assigns to the node,
  ready, and no runner process the state does not know: an orphan).
- `missing_placements`: what the soak re-places to keep its layout (one single-node instance
  per node and one Pipeline across two nodes), as an operator would after a node was lost.
- `judge`: the pass criteria over every client request and every fault.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from skulk.cluster.state import SERVING_KINDS

ROLES = ("bus", "eventlog", "store", "gossip", "master", "worker", "api", "janitor")
READY = SERVING_KINDS
RETRYABLE_CODES = (500, 503)
"""What a client is promised: a lost instance or a master failover is a 500/503 in the envelope (or
an SSE error event with that code): the client retries."""


@dataclass(frozen=True)
class NodeView:
    """One node as seen at one moment: its id, its `/state`, the titles of its live processes."""

    name: str
    node_id: str | None
    state: dict[str, Any] | None
    titles: tuple[str, ...]


def shards(instance: dict[str, Any]) -> dict[str, Any]:
    """An instance's `shardAssignments` (the instance JSON is tagged by its kind)."""
    return next(iter(instance.values()))["shardAssignments"]


def membership_problems(views: list[NodeView]) -> list[str]:
    problems = []
    ids = {v.node_id for v in views}
    for v in views:
        if v.node_id is None or v.state is None:
            problems.append(f"{v.name}: no /node_id or /state answer")
    if problems:
        return problems
    answered = [(v, v.state) for v in views if v.state is not None]  # every view: checked above
    masters = {state["masterNodeId"] for _, state in answered}
    if len(masters) != 1 or not next(iter(masters)):
        problems.append(f"masters disagree: {sorted(map(str, masters))}")
    elif next(iter(masters)) not in ids:
        problems.append(f"master {next(iter(masters))} is not a live node")
    for v, state in answered:
        members = set(state["nodeIdentities"])
        if members != ids:
            problems.append(f"{v.name}: members {sorted(members)} != live nodes {sorted(map(str, ids))}")
    return problems


def agreement_problems(views: list[NodeView]) -> list[str]:
    """Each node's state against its processes (call once membership agrees)."""
    problems = []
    reference = views[0].state or {}
    for v in views:
        state = v.state or {}
        if set(state.get("instances", {})) != set(reference.get("instances", {})):
            problems.append(f"{v.name}: instances {sorted(state.get('instances', {}))} != "
                            f"{views[0].name}'s {sorted(reference.get('instances', {}))}")
        placed = {rid for inst in state.get("instances", {}).values() for rid in shards(inst)["runnerToShard"]}
        for rid in sorted(set(state.get("runners", {})) - placed):
            problems.append(f"{v.name}: the state lists runner {rid} of no instance")
        roles = Counter(t[len("skulk: "):] for t in v.titles if t.startswith("skulk: ")
                        and not t.startswith("skulk: runner "))
        for role in (*ROLES, "supervisor"):
            if roles[role] != 1:
                problems.append(f"{v.name}: {roles[role]} processes titled 'skulk: {role}'")
        if roles["api worker"] < 1:
            problems.append(f"{v.name}: no api worker")
        actual = Counter(t[len("skulk: runner "):] for t in v.titles if t.startswith("skulk: runner "))
        expected = {rid for inst in state.get("instances", {}).values()
                    for nid, rid in shards(inst)["nodeToRunner"].items() if nid == v.node_id}
        for rid in sorted(set(actual) - expected):
            problems.append(f"{v.name}: runner process {rid} has no instance here (orphan)")
        for rid in sorted(expected - set(actual)):
            problems.append(f"{v.name}: runner {rid} of the state has no process")
        for rid, n in actual.items():
            if n > 1:
                problems.append(f"{v.name}: {n} processes for runner {rid}")
        for rid in sorted(expected):
            kind = next(iter(state.get("runners", {}).get(rid, {"absent": {}})))
            if kind not in READY:
                problems.append(f"{v.name}: runner {rid} is {kind}")
    return problems


def pending_recreations(state: dict[str, Any]) -> list[str]:
    """Deleted instances the leader is going to re-create (due time set, neither replaced nor
    given up)."""
    return sorted(i for i, d in state.get("deletedInstances", {}).items()
                  if d.get("recreateAt") and not d.get("replacedBy") and d.get("cause") != "given_up")


def missing_placements(state: dict[str, Any], node_ids: list[str], model: str) -> list[dict[str, Any]]:
    """`POST /place_instance` bodies that restore the layout: a single-node instance on every
    node that has none, and one Pipeline across two nodes when there is none (with >= 2 nodes).
    Nothing while the leader has a re-creation pending: it restores its own instance first."""
    if pending_recreations(state):
        return []
    spans = [set(shards(i)["nodeToRunner"]) for i in state.get("instances", {}).values()
             if shards(i)["modelId"] == model]
    bodies: list[dict[str, Any]] = []
    for nid in node_ids:
        if {nid} not in spans:
            bodies.append({"model_id": model, "excluded_nodes": [n for n in node_ids if n != nid]})
    if len(node_ids) >= 2 and not any(len(s) >= 2 for s in spans):
        bodies.append({"model_id": model, "min_nodes": 2, "sharding": "Pipeline"})
    return bodies


REPLICAS = 2
"""The replicas mode: the model as this many single-node instances on distinct nodes."""


def replica_nodes(state: dict[str, Any], model: str) -> list[set[str]]:
    """The node sets of the model's instances."""
    return [set(shards(i)["nodeToRunner"]) for i in state.get("instances", {}).values()
            if shards(i)["modelId"] == model]


def replica_problems(state: dict[str, Any], model: str) -> list[str]:
    """The replicas mode's layout: at least `REPLICAS` single-node instances on distinct nodes,
    each with its runner ready (a lost one is placed again by the leader: `placement.replace_lost`)."""
    spans = replica_nodes(state, model)
    nodes = {n for s in spans if len(s) == 1 for n in s}
    if len(nodes) < REPLICAS:
        return [f"{len(nodes)} replica(s) of {model} on distinct nodes (want {REPLICAS})"]
    ready = {rid for rid, r in state.get("runners", {}).items() if "RunnerReady" in r or "RunnerRunning" in r}
    placed = {rid for i in state.get("instances", {}).values() for rid in shards(i)["runnerToShard"]}
    return [f"runner {rid} not serving yet" for rid in sorted(placed - ready)]


def cutting_target(state: dict[str, Any], names: dict[str, str], serving: list[str],
                   only: Collection[str] | None = None) -> tuple[str, int] | None:
    """The replicas mode's kill: of the `serving` node names, the one whose instance runs the
    most streams that another node's API holds (a kill there cuts streams that can go on
    elsewhere; the soak tests that promise, not only the killed API's own clients), and how many.
    With `only`, just the tasks of those command ids count (`mid_answer`). None when no such
    stream runs now. `names`: node id -> name."""
    node_of = {iid: next(iter(shards(i)["nodeToRunner"]), None) for iid, i in state.get("instances", {}).items()}
    cut: dict[str, int] = {}
    for task in state.get("tasks", {}).values():
        t = next(iter(task.values()))
        where = names.get(node_of.get(t.get("instanceId"), "") or "")
        if (t.get("taskStatus") == "Running" and where in serving and names.get(t.get("ownerNode", "")) != where
                and (only is None or t.get("commandId") in only)):
            cut[where] = cut.get(where, 0) + 1
    if not cut:
        return None
    best = max(sorted(cut), key=lambda n: cut[n])
    return best, cut[best]


def mid_answer(records: list[RequestRecord], ahead: int) -> set[str]:
    """The command ids of the streams a kill can cut mid-answer: their client has had tokens (the
    runner admitted them: one cut before that is only routed again) and asked for at least `ahead`
    more (they still run when the kill lands, however fast this machine is)."""
    return {r.command_id for r in records
            if r.command_id and r.ended is None and r.tokens > 0 and r.max_tokens - r.tokens >= ahead}


def replica_placements(state: dict[str, Any], node_ids: list[str], model: str) -> list[dict[str, Any]]:
    """At the soak's start only: one single-node instance on each of the first `REPLICAS` nodes
    that has none."""
    have = {n for s in replica_nodes(state, model) for n in s}
    return [{"model_id": model, "excluded_nodes": [n for n in node_ids if n != nid]}
            for nid in node_ids[:REPLICAS] if nid not in have]


def replica_errors(records: list[RequestRecord], faults: list[FaultRecord], grace_s: float) -> list[RequestRecord]:
    """The replicas mode's promise: a stream whose instance is lost goes on on the surviving
    replica, so the only error allowed is a request whose own API node the fault killed (its
    connection drops: nothing can continue it)."""
    wrong = []
    for rec in records:
        if rec.error_at is None:
            continue
        fault = window_of(rec.error_at, faults, grace_s)
        if not (rec.transport and fault is not None and fault.node == rec.node):
            wrong.append(rec)
    return wrong


@dataclass
class RequestRecord:
    """One client request as the client saw it (monotonic times)."""

    client: int
    node: str
    started: float
    max_tokens: int
    command_id: str = ""  # from its first chunk: the task's in the cluster state
    ended: float | None = None
    status: int = 0
    tokens: int = 0
    done: bool = False
    code: int | None = None  # the error's code (envelope or SSE error event)
    error: str = ""  # the error's message (for people; never decided on)
    error_type: str = ""
    transport: bool = False  # the connection failed (refused, reset, cut): no envelope possible
    in_stream: bool = False  # the error came as an SSE event after HTTP 200
    hung: bool = False  # the request passed its own deadline without an answer
    error_at: float | None = None

    @property
    def failed(self) -> bool:
        return self.error_at is not None


@dataclass
class FaultRecord:
    """One injected fault: what, where, when, and when the cluster had converged again."""

    kind: str
    node: str
    target: str
    at: float
    detail: str = ""
    converged_at: float | None = None
    problems: list[str] = field(default_factory=list)  # why it did not converge, if it did not


def retryable(rec: RequestRecord) -> bool:
    return rec.transport or rec.code in RETRYABLE_CODES


def error_kind(rec: RequestRecord) -> str:
    """A label to count errors by (for the report only): code, type and the message's shape."""
    if rec.transport:
        return f"transport ({rec.error_type})"
    shape = re.sub(r"[0-9a-f]{8,}|\d+(\.\d+)?", "N", rec.error)[:90]
    where = "in stream" if rec.in_stream else "before stream"
    return f"{rec.code} {rec.error_type} {where}: {shape}"


def window_of(at: float, faults: list[FaultRecord], grace_s: float) -> FaultRecord | None:
    """The fault whose disturbance (from injection to convergence + grace) holds `at`."""
    found = None
    for f in faults:
        end = (f.converged_at if f.converged_at is not None else float("inf")) + grace_s
        if f.at <= at <= end:
            found = f
    return found


@dataclass
class Verdict:
    requests: int = 0
    served: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    hung: list[RequestRecord] = field(default_factory=list)
    not_retryable: list[RequestRecord] = field(default_factory=list)
    unexplained: list[RequestRecord] = field(default_factory=list)  # an error with no fault to blame
    late: list[tuple[RequestRecord, float]] = field(default_factory=list)  # beyond the promise
    worst_fault_to_error: float = 0.0  # requests in flight at the fault
    worst_error_latency: float = 0.0  # any error: from max(request start, fault) to the error
    unconverged: list[FaultRecord] = field(default_factory=list)
    worst_convergence: float = 0.0
    leaked: list[str] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    replica_errors: list[RequestRecord] = field(default_factory=list)  # the replicas mode's promise broken

    @property
    def passed(self) -> bool:
        return (self.served > 0 and not self.hung and not self.not_retryable and not self.unexplained
                and not self.late and not self.unconverged and not self.leaked and not self.ports
                and not self.replica_errors)


def judge(records: list[RequestRecord], faults: list[FaultRecord], promise_s: float, grace_s: float,
          leaked: list[str], ports: list[int]) -> Verdict:
    """Every request got its tokens or a retryable error within `promise_s` of the fault (or of
    its own start, when it began after the fault), none hung, every error falls in a fault's
    disturbance window (a transport error only on the node the fault hit), every fault was
    followed by convergence, nothing leaked."""
    v = Verdict(requests=len(records), leaked=list(leaked), ports=sorted(ports))
    v.faults = Counter(f.kind for f in faults)
    for f in faults:
        if f.converged_at is None:
            v.unconverged.append(f)
        else:
            v.worst_convergence = max(v.worst_convergence, f.converged_at - f.at)
    for rec in records:
        if rec.hung:
            v.hung.append(rec)
            continue
        if rec.done and not rec.failed:
            v.served += 1
            continue
        if rec.error_at is None:
            continue  # cut short by the end of the soak
        v.errors[error_kind(rec)] += 1
        if not retryable(rec):
            v.not_retryable.append(rec)
        fault = window_of(rec.error_at, faults, grace_s)
        if fault is None or (rec.transport and fault.node != rec.node):
            v.unexplained.append(rec)
            continue
        latency = rec.error_at - max(rec.started, fault.at)
        v.worst_error_latency = max(v.worst_error_latency, latency)
        if rec.started < fault.at:
            v.worst_fault_to_error = max(v.worst_fault_to_error, rec.error_at - fault.at)
        if latency > promise_s:
            v.late.append((rec, latency))
    return v
