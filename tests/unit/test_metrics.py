"""Prometheus metrics: the pure parts (outcomes, token deltas, scrape-time families, the runner
filter), what a request's meter and the worker's runner gauges record, and the multiprocess
merge across real processes (`node/metrics.py`, `services/api/generate/metering.py`,
`services/worker/runner_gauges.py`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from prometheus_client.multiprocess import MultiProcessCollector

from skulk.cluster.state import Instance, RunnerStatus, ShardMeta, State
from skulk.node import metrics
from skulk.node.metrics import CLIENT_GONE, Outcome
from skulk.services.api.generate.metering import ApiShape, StreamMeter, outcome_of, refusal_outcome
from skulk.services.worker.runner_gauges import RunnerGauges, token_delta
from skulk.wire.commands import RejectReason
from skulk.wire.control import ChildStatus
from skulk.wire.events import RunnerReport
from skulk.wire.inference import Done, Failed, FailReason, TokenChunk, ToolCall
from skulk.wire.models import ModelCard

CARD = ModelCard(model_id="skulk/demo-tiny", storage_size_bytes=13_000_000, n_layers=4, hidden_size=256,
                 num_key_value_heads=2, supports_tensor=True, context_length=2048, family="qwen2",
                 quantization="float32")


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def done(tokens: int, finish: str = "length") -> Done:
    return Done(request_id="r", seq=tokens, finish_reason=finish, prompt_tokens=5, completion_tokens=tokens,
                prompt_tps=0.0, generation_tps=0.0, peak_memory_bytes=0)


def chunk(seq: int, text: str = "x", **kw: object) -> TokenChunk:
    return TokenChunk(request_id="r", seq=seq, text=text, token=seq, **kw)  # type: ignore[arg-type]


def state_with(runner_ids: tuple[str, ...], statuses: tuple[str, ...] = ()) -> State:
    shard = ShardMeta(kind="Pipeline", device_rank=0, world_size=1, start_layer=0, end_layer=4, n_layers=4)
    inst = Instance(instance_id="i1", instance_meta="MlxRing", card=CARD, node_to_runner={},
                    runner_to_shard={r: shard for r in runner_ids}, context_token_limit=2048)
    return State(session="s", instances={"i1": inst},
                 runners={r: RunnerStatus(kind="RunnerReady") for r in statuses})


# ---- outcomes ------------------------------------------------------------------------------
def test_an_admitted_request_ends_completed_failed_or_cancelled_with_its_typed_reason():
    assert outcome_of(done(3, "stop")) == (Outcome.COMPLETED, "stop")
    assert outcome_of(Failed(request_id="r", error="x", reason=FailReason.STALLED)) == (Outcome.FAILED, "stalled")
    assert outcome_of(Failed(request_id="r", error="x", reason=FailReason.CANCELLED)) == \
        (Outcome.CANCELLED, "cancelled")
    assert outcome_of(None) == (Outcome.CANCELLED, CLIENT_GONE)


@pytest.mark.parametrize("reason,outcome", [
    (FailReason.BUSY, Outcome.REFUSED), (FailReason.CONTEXT_LENGTH_EXCEEDED, Outcome.REFUSED),
    (RejectReason.NO_INSTANCE, Outcome.REFUSED), (RejectReason.NO_LEADER, Outcome.REFUSED),
    (metrics.INTERNAL_ERROR, Outcome.REFUSED), (FailReason.RUNNER_FAILED, Outcome.FAILED),
    (FailReason.CANCELLED, Outcome.CANCELLED)])
def test_a_request_ended_before_its_stream_is_refused_unless_its_runner_failed_or_it_was_cancelled(
        reason, outcome):
    assert refusal_outcome(reason) == outcome


# ---- a request's meter -----------------------------------------------------------------------
def test_the_meter_times_the_first_token_and_the_gaps_and_counts_usage_tokens():
    api, model = ApiShape.OPENAI_CHAT, "meter/one"
    before = value("skulk_requests_total", api=api, outcome="completed", reason="length")
    meter = StreamMeter(api, model, opened_at=100.0)
    assert value("skulk_requests_in_flight", api=api) >= 1
    in_flight = value("skulk_requests_in_flight", api=api)
    meter.saw(object(), 100.1)  # a keep-alive or progress: no token
    meter.saw(chunk(0), 100.5)
    meter.saw(chunk(1), 100.75)
    meter.saw(chunk(2, "", tool_calls=(ToolCall(id="c", name="f", arguments="{}"),)), 100.8)  # no token
    meter.saw(chunk(3), 101.0)
    meter.closed(done(7))
    meter.closed(done(7))  # once only
    assert value("skulk_time_to_first_token_seconds_count", api=api, model=model) == 1
    assert value("skulk_time_to_first_token_seconds_sum", api=api, model=model) == pytest.approx(0.5)
    assert value("skulk_inter_token_latency_seconds_count", api=api, model=model) == 2
    assert value("skulk_inter_token_latency_seconds_sum", api=api, model=model) == pytest.approx(0.5)
    assert value("skulk_generated_tokens_total", api=api, model=model) == 7  # usage's count
    assert value("skulk_requests_total", api=api, outcome="completed", reason="length") == before + 1
    assert value("skulk_requests_in_flight", api=api) == in_flight - 1


def test_a_cancelled_stream_counts_the_tokens_it_streamed_and_a_refusal_none():
    api, model = ApiShape.OLLAMA_CHAT, "meter/two"
    meter = StreamMeter(api, model, opened_at=0.0)
    meter.saw(chunk(0), 1.0)
    meter.saw(chunk(1), 1.5)
    meter.closed(None)
    assert value("skulk_generated_tokens_total", api=api, model=model) == 2
    assert value("skulk_requests_total", api=api, outcome="cancelled", reason=CLIENT_GONE) >= 1
    refused = StreamMeter(api, "meter/nothing", opened_at=0.0)
    refused.refused(RejectReason.NO_INSTANCE)
    assert value("skulk_requests_total", api=api, outcome="refused", reason="no_instance") >= 1
    assert value("skulk_generated_tokens_total", api=api, model="meter/nothing") == 0
    assert value("skulk_time_to_first_token_seconds_count", api=api, model="meter/nothing") == 0


# ---- the worker's runner gauges ----------------------------------------------------------------
def test_token_delta_takes_a_baseline_then_differences_and_restarts_from_zero_for_a_new_process():
    assert token_delta(None, (10, 500)) == 0
    assert token_delta((10, 500), (10, 530)) == 30
    assert token_delta((10, 530), (11, 12)) == 12  # the runner restarted
    assert token_delta((10, 530), (10, 3)) == 3  # a total that went down: a new count


def test_runner_reports_become_gauges_a_state_set_a_token_counter_and_the_busy_flag():
    gauges, state = RunnerGauges(), state_with(("g1",))
    labels = {"runner_id": "g1", "instance_id": "i1", "model": "skulk/demo-tiny"}

    def report(active: int, waiting: int, total: int, kind: str = "RunnerRunning") -> RunnerReport:
        return RunnerReport(runner_id="g1", instance_id="i1", status=RunnerStatus(kind=kind), active=active,
                            waiting=waiting, pid=42, tokens_total=total)

    gauges.on_report(report(0, 0, 0, "RunnerReady"), state)
    assert value("skulk_node_busy") == 0
    gauges.on_report(report(2, 1, 40), state)
    gauges.on_report(report(2, 1, 65), state)
    assert value("skulk_runner_batch_size", **labels) == 2 and value("skulk_runner_queue_depth", **labels) == 1
    assert value("skulk_runner_state", **labels, state="RunnerRunning") == 1
    assert value("skulk_runner_state", **labels, state="RunnerReady") == 0
    assert value("skulk_runner_generated_tokens_total", **labels) == 65
    assert value("skulk_node_busy") == 1
    gauges.forget_gone(state_with(()))  # its instance was deleted
    assert value("skulk_node_busy") == 0
    stranger = RunnerReport(runner_id="made-up", instance_id="i1", status=RunnerStatus(kind="RunnerRunning"),
                            active=5, pid=7, tokens_total=9)
    gauges.on_report(stranger, state)  # a runner the state does not know: no series, no busy
    gauges.on_report(stranger, None)
    assert REGISTRY.get_sample_value("skulk_runner_batch_size",
                                     {"runner_id": "made-up", "instance_id": "i1", "model": ""}) is None
    assert REGISTRY.get_sample_value("skulk_runner_batch_size",
                                     {"runner_id": "made-up", "instance_id": "i1", "model": "skulk/demo-tiny"}) is None
    assert value("skulk_node_busy") == 0


def test_live_runners_are_those_placed_or_with_a_status_and_only_their_series_are_kept():
    state = state_with(("a",), statuses=("b",))
    assert metrics.live_runners(state) == {"a", "b"}
    for rid in ("a", "gone"):
        metrics.RUNNER_ACTIVE.labels(rid, "i1", "m").set(1)
    kept = {f.name: f for f in metrics.only_live_runners(REGISTRY.collect(), metrics.live_runners(state))}
    assert "a" in {s.labels["runner_id"] for s in kept["skulk_runner_batch_size"].samples} <= {"a", "b"}
    everything = {f.name: f for f in metrics.only_live_runners(REGISTRY.collect(), None)}
    assert "gone" in {s.labels["runner_id"] for s in everything["skulk_runner_batch_size"].samples}


# ---- read at scrape time -----------------------------------------------------------------------
def child(cid: str, state: str = "running", restarts: int = 0, supervisor: str = "root",
          kind: str = "worker") -> ChildStatus:
    return ChildStatus(id=cid, supervisor=supervisor, kind=kind, pid=1, state=state, restarts=restarts,
                       uptime_s=1.0)


def samples(families: list) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_the_supervisors_status_gives_restarts_per_role_processes_per_state_and_health():
    got = samples(metrics.supervisor_families([
        child("api", restarts=2), child("master"), child("runners", kind="supervisor", restarts=5),
        child("r-1", supervisor="runners", restarts=1), child("r-2", "starting", supervisor="runners")]))
    assert got[("skulk_role_restarts_total", (("role", "api"),))] == 2
    assert got[("skulk_role_restarts_total", (("role", "master"),))] == 0
    assert got[("skulk_role_restarts_total", (("role", "runner"),))] == 1
    assert ("skulk_role_restarts_total", (("role", "runners"),)) not in got  # a supervisor, not a process
    assert got[("skulk_processes", (("role", "runner"), ("state", "running")))] == 1
    assert got[("skulk_processes", (("role", "runner"), ("state", "starting")))] == 1
    assert got[("skulk_node_healthy", ())] == 0
    healthy = samples(metrics.supervisor_families([child("api"), child("r-1", supervisor="runners")]))
    assert healthy[("skulk_node_healthy", ())] == 1


def test_staging_families_sum_the_copies():
    got = samples(metrics.staging_families([100, 23]))
    assert got[("skulk_staging_bytes", ())] == 123 and got[("skulk_staged_models", ())] == 2


# ---- multiprocess: what several processes wrote, merged as a scrape merges it -------------------
WRITER = """
import sys, time
from skulk.services.api.generate.metering import ApiShape, StreamMeter
from skulk.node import metrics
from skulk.node.metrics import Outcome
metrics.REQUESTS.labels("openai_chat", Outcome.COMPLETED, "stop").inc(int(sys.argv[1]))
metrics.NODE_BUSY.set(int(sys.argv[2]))
StreamMeter(ApiShape.OPENAI_CHAT, "m", time.monotonic())  # left in flight
"""


def test_processes_sum_their_counters_the_latest_gauge_wins_and_a_dead_processs_live_gauge_goes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    for count, busy in ((2, 1), (3, 0)):  # the second writes last: its busy flag wins
        proc = subprocess.run([sys.executable, "-c", WRITER, str(count), str(busy)], env=env, timeout=60,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr

    def merged() -> dict:
        return samples(list(MultiProcessCollector(None, str(tmp_path)).collect()))

    got = merged()
    assert got[("skulk_requests_total", (("api", "openai_chat"), ("outcome", "completed"), ("reason", "stop")))] == 5
    assert got[("skulk_node_busy", ())] == 0
    assert got[("skulk_requests_in_flight", (("api", "openai_chat"),))] == 2
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    metrics.forget_dead_processes()  # both writers have exited
    got = merged()
    assert ("skulk_requests_in_flight", (("api", "openai_chat"),)) not in got
    assert got[("skulk_requests_total", (("api", "openai_chat"), ("outcome", "completed"), ("reason", "stop")))] == 5
