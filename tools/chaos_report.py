"""The chaos soak's printed figures and verdict (text only; the judging is `chaos_checks.judge`)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tools.chaos_checks import FaultRecord, RequestRecord, Verdict


def _req(rec: RequestRecord) -> str:
    what = "HUNG" if rec.hung else f"{rec.code} {rec.error_type}: {rec.error[:160]}"
    return f"client {rec.client} -> {rec.node} ({rec.tokens} tokens of {rec.max_tokens}): {what}"


def report(v: Verdict, cfg: Any, faults: list[FaultRecord], restarts: list[str], seconds: float) -> str:
    lines = [f"== chaos soak: {seconds:.0f}s of clients, {cfg.nodes} nodes, {cfg.clients} clients, "
             f"seed {cfg.seed}, promise {cfg.promise_s:.0f}s, request deadline {cfg.request_deadline_s:.0f}s",
             f"faults injected: {sum(v.faults.values())}"]
    lines += [f"  {n:4d}  {kind}" for kind, n in sorted(v.faults.items(), key=lambda kv: (-kv[1], kv[0]))]
    failed = sum(v.errors.values())
    lines.append(f"requests: {v.requests} sent, {v.served} served in full, {failed} errors, {len(v.hung)} hung, "
                 f"{v.requests - v.served - failed - len(v.hung)} cut short by the soak's end")
    lines.append("errors by kind:")
    lines += [f"  {n:4d}  {kind}" for kind, n in v.errors.most_common()] or ["  none"]
    lines.append(f"worst time from a fault to a client's error (requests in flight at the fault): "
                 f"{v.worst_fault_to_error:.2f}s; worst from a fault or a later request's start: "
                 f"{v.worst_error_latency:.2f}s (promise {cfg.promise_s:.0f}s)")
    lines.append(f"convergence: worst {v.worst_convergence:.1f}s after a fault; not converged: {len(v.unconverged)}")
    lines.append(f"node restarts by the soak: {len(restarts)} {dict(Counter(r.split(' ', 1)[1] for r in restarts))}")
    lines.append(f"hung clients: {len(v.hung)} (must be 0)")
    if getattr(cfg, "replicas", False):
        lines.append(f"replicas mode: streams ended in an error though a replica survived: "
                     f"{len(v.replica_errors)} (must be 0)")
    lines.append(f"leaked processes: {len(v.leaked)} (must be 0); ports left listening: {len(v.ports)} (must be 0)")
    for label, items in (("hung", [_req(r) for r in v.hung]),
                         ("not retryable", [_req(r) for r in v.not_retryable]),
                         ("unexplained (no fault to blame)", [_req(r) for r in v.unexplained]),
                         ("later than the promise", [f"{lat:.1f}s {_req(r)}" for r, lat in v.late]),
                         ("not converged", [f"{f.kind} on {f.node}: {f.problems}" for f in v.unconverged]),
                         ("leaked", v.leaked), ("ports still listening", [str(p) for p in v.ports]),
                         ("a stream with a surviving replica ended in an error", [_req(r) for r in v.replica_errors])):
        if items:
            lines.append(f"FAIL {label}:")
            lines += [f"  {item}" for item in items[:20]]
    lines.append("PASS" if v.passed else "FAIL")
    return "\n".join(lines)
