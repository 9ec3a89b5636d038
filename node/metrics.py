"""Every Prometheus metric a node exports, declared once (`GET /metrics` serves them).

A node is many processes (the API's gunicorn workers, the worker, the eventlog), so the
metrics use prometheus_client's multiprocess mode: each process writes its values to mmap
files under `PROMETHEUS_MULTIPROC_DIR` (`<run dir>/metrics`, wiped at node start; the
supervisor puts it in every child's environment before the child imports prometheus_client),
and the API merges them at each scrape. Counters and histograms sum over processes, dead ones
included (a restarted role keeps its history); gauges say how they merge (`mostrecent`: the
last value written wins, so a restarted role's new value replaces its predecessor's; `livesum`:
the sum over live processes, dead gunicorn workers being forgotten by `mark_dead`).

Some figures are read at scrape time instead (the supervisor's restarts and process states,
the staged bytes on disk): the `*_families` functions below turn them into metric families
(pure). Labels are bounded: client shape, outcome, typed reason, model, runner, role; never a
task or command id.
"""

from __future__ import annotations

import glob
import os
import re
from collections import Counter as Tally
from collections.abc import Iterable, Sequence
from enum import StrEnum

import psutil
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import mark_process_dead

from skulk.cluster.state import State
from skulk.wire.control import ChildStatus

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class Outcome(StrEnum):
    """How a generation request ended, as the API saw it."""

    COMPLETED = "completed"  # reason: the finish reason (stop, length, tool_calls)
    FAILED = "failed"  # reason: the FailReason (runner_failed, stalled, ...)
    CANCELLED = "cancelled"  # reason: "cancelled" (POST /v1/cancel) or CLIENT_GONE
    REFUSED = "refused"  # before any output; reason: the FailReason or RejectReason (busy, no_instance, ...)


CLIENT_GONE = "client_gone"
"""The reason of a request whose client went away before its outcome."""
INTERNAL_ERROR = "internal_error"
"""The reason of a request that an unexpected exception ended before its stream opened."""

# ---- the API (one series set per gunicorn worker, summed) ------------------------------------
REQUESTS = Counter("skulk_requests", "Generation requests by client shape and how they ended",
                   ("api", "outcome", "reason"))
GENERATED_TOKENS = Counter("skulk_generated_tokens", "Tokens generated for clients (usage's completion "
                           "tokens when a request completes, the tokens streamed otherwise)", ("api", "model"))
SPEC_DRAFTS = Counter("skulk_speculative_draft_tokens", "Speculative drafts the model verified for clients' "
                      "requests, by whether it kept them (`accepted`) or threw them away (`rejected`)",
                      ("api", "model", "verdict"))
TTFT = Histogram("skulk_time_to_first_token_seconds", "From the request reaching the API to its first token "
                 "leaving the API (routing, queueing and prefill included)", ("api", "model"),
                 buckets=(0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0))
INTER_TOKEN = Histogram("skulk_inter_token_latency_seconds", "Between successive tokens of one stream, "
                        "as the API passes them on", ("api", "model"),
                        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0))
IN_FLIGHT = Gauge("skulk_requests_in_flight", "Generation requests this node's API is serving",
                  ("api",), multiprocess_mode="livesum")
API_RECORDS_DROPPED = Counter("skulk_api_event_records_dropped", "The API's event-log records (a request's "
                              "routing, chunks, end) dropped because the eventlog could not take them at once "
                              "(stopped or behind): a stream never waits on the log", ("record",))

# ---- the worker, from its runners' RunnerReports on the bus ----------------------------------
RUNNER_LABELS = ("runner_id", "instance_id", "model")
RUNNER_WAITING = Gauge("skulk_runner_queue_depth", "Requests waiting behind a runner's batch",
                       RUNNER_LABELS, multiprocess_mode="mostrecent")
RUNNER_ACTIVE = Gauge("skulk_runner_batch_size", "Requests in a runner's batch", RUNNER_LABELS,
                      multiprocess_mode="mostrecent")
RUNNER_STATE = Gauge("skulk_runner_state", "1 for a runner's current status kind (RunnerReady, ...), 0 for "
                     "the others", (*RUNNER_LABELS, "state"), multiprocess_mode="mostrecent")
RUNNER_TOKENS = Counter("skulk_runner_generated_tokens", "Tokens a runner generated (all its requests)",
                        RUNNER_LABELS)
NODE_BUSY = Gauge("skulk_node_busy", "1 while a runner of this node has requests in its batch or queue, else 0",
                  multiprocess_mode="mostrecent")
RUNNER_METRICS = ("skulk_runner_queue_depth", "skulk_runner_batch_size", "skulk_runner_state",
                  "skulk_runner_generated_tokens")

# ---- the eventlog ----------------------------------------------------------------------------
EVENTLOG_COUNTING = Gauge("skulk_eventlog_counting_only", "1 while the event log only counts events "
                          "(the disk is full or failing), 0 while it writes them", multiprocess_mode="mostrecent")


def multiproc_dir() -> str | None:
    """The shared metrics directory, or None when this process runs outside a node (tests)."""
    path = os.environ.get(MULTIPROC_ENV)
    return path if path and os.path.isdir(path) else None


def mark_dead(pid: int) -> None:
    """Forget a dead process's live gauges (a gunicorn worker that exited)."""
    if (path := multiproc_dir()) is not None:
        mark_process_dead(pid, path)


_LIVE_FILE = re.compile(r"gauge_live\w+?_(\d+)\.db$")


def forget_dead_processes() -> None:
    """Forget the live gauges of every process that is gone: the workers of a previous API
    arbiter died with it, and nobody called `mark_dead` for them."""
    if (path := multiproc_dir()) is None:
        return
    for name in glob.glob(os.path.join(path, "gauge_live*.db")):
        if (m := _LIVE_FILE.search(name)) and not psutil.pid_exists(int(m.group(1))):
            mark_process_dead(int(m.group(1)), path)


# ---- read at scrape time (pure) --------------------------------------------------------------
def role_of(child: ChildStatus) -> str:
    """A process's role: its child id, or `runner` for any runner (bounded labels)."""
    return "runner" if child.supervisor == "runners" else child.id


def supervisor_families(children: Sequence[ChildStatus]) -> list[Metric]:
    """Restarts per role, processes per role and state, and whether the node is whole (every
    process running: what `skulk admin wait` waits for), from the supervisor's status."""
    processes = [c for c in children if c.kind == "worker"]
    restarts = CounterMetricFamily("skulk_role_restarts", "Restarts of a role's processes since the node "
                                   "started (after a crash, or asked for)", labels=("role",))
    by_role: Tally[str] = Tally()
    for c in processes:
        by_role[role_of(c)] += c.restarts
    for role, count in sorted(by_role.items()):
        restarts.add_metric((role,), count)
    states = GaugeMetricFamily("skulk_processes", "This node's processes by role and supervisor state",
                               labels=("role", "state"))
    for (role, state), count in sorted(Tally((role_of(c), c.state) for c in processes).items()):
        states.add_metric((role, state), count)
    whole = all(c.state == "running" for c in processes) and bool(processes)
    healthy = GaugeMetricFamily("skulk_node_healthy", "1 when every process of this node is running (none "
                                "starting, restarting or waiting on a back-off), else 0", value=int(whole))
    return [restarts, states, healthy]


def staging_families(staged_bytes: Sequence[int]) -> list[Metric]:
    """This node's staged model copies (one size per complete copy)."""
    return [GaugeMetricFamily("skulk_staging_bytes", "Bytes of the complete staged model copies on this node",
                              value=sum(staged_bytes)),
            GaugeMetricFamily("skulk_staged_models", "Complete staged model copies on this node",
                              value=len(staged_bytes))]


def live_runners(state: State) -> set[str]:
    """The runners the state knows: placed in an instance, or with a status."""
    return set(state.runners).union(*(inst.runner_to_shard for inst in state.instances.values()))


def only_live_runners(families: Iterable[Metric], live: set[str] | None) -> list[Metric]:
    """Drop the per-runner series of runners no longer in the state (multiprocess mode cannot
    remove a label set, so a gone runner's last values stay in its worker's file)."""
    out = []
    for family in families:
        if live is not None and family.name in RUNNER_METRICS:
            family.samples = [s for s in family.samples if s.labels.get("runner_id") in live]
        out.append(family)
    return out
