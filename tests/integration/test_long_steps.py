"""A runner inside one long step (a first-use GPU compile, a big prefill on a slow device) is
not a wedge: its watch thread tells the supervisor which step its loop is in, and the step may
run to `runner.step_deadline_s` (not the 10 missed beats that kill a silent runner). One that
never returns is still killed at that deadline, and its client gets an error at once.

The long step is made with the test-only fault injection (`SKULK_FAULTS`), inside the real
runner's first prefill step, on the real demo model."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from skulk.node.config import NodeConfig
from skulk.supervisor.tree import RUNNER_MIN_LIVENESS
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import wait_until
from tests.integration.patience import patience
from tests.integration.serving import MODEL, NO_RESUME, http_json, wait_model_ready

SILENT_S = RUNNER_MIN_LIVENESS * NodeConfig(home=Path()).heartbeat_s  # a silent runner is given this (10 s)
SLOW_S = 2 * SILENT_S  # a step twice that long must not be taken for silence
STEP_DEADLINE_S = 15.0


def ask(node: Any, out: dict[str, Any]) -> None:
    t0 = time.monotonic()
    out["status"], out["body"] = http_json(f"{node.url}/v1/chat/completions", {
        "model": MODEL, "max_tokens": 4, "temperature": 0, "messages": [{"role": "user", "content": "hello"}]},
        timeout=SLOW_S + 60)
    out["took"] = time.monotonic() - t0


def test_a_long_first_step_answers_and_a_step_that_never_returns_fails_at_its_deadline(nodes, demo_model):
    slow = nodes("slow", args=("--place", MODEL), models={DEMO_DIR: demo_model},
                 env={"SKULK_FAULTS": f"runner@prefill=slow:{SLOW_S:.0f}"})
    stuck = nodes("stuck", config={"runner": {"step_deadline_s": STEP_DEADLINE_S}, **NO_RESUME},  # its error
                  args=("--place", MODEL), models={DEMO_DIR: demo_model}, env={"SKULK_FAULTS": "runner@prefill=hang"})
    slow_runner, stuck_runner = wait_model_ready(slow), wait_model_ready(stuck)
    answers: dict[str, dict[str, Any]] = {"slow": {}, "stuck": {}}
    threads = [threading.Thread(target=ask, args=(n, answers[k])) for k, n in (("slow", slow), ("stuck", stuck))]
    for t in threads:
        t.start()

    def long_step() -> dict[str, Any] | None:  # the runner says which step it is in
        doc = http_json(f"{slow.url}/v1/diagnostics/node")[1]
        mine = next((r for r in doc["supervisorRunners"] if r["runnerId"] == slow_runner), {})
        return next((e for e in mine.get("flightRecorder", []) if e["event"] == "long_step"), None)
    entry = wait_until(slow, long_step, 20, "a long_step entry in the slow runner's flight recorder")
    assert entry["phase"] == "prefill_stream" and "prefill step" in entry["detail"], entry
    for t in threads:
        t.join(SLOW_S + 90)

    got = answers["slow"]
    assert got["status"] == 200 and got["body"]["choices"][0]["message"]["content"], got
    assert got["took"] >= SLOW_S - 1, got["took"]
    log = (slow.home / "logs" / "supervisor.log").read_text()
    assert "missed" not in log and "killing" not in log, log[-2000:]
    assert http_json(f"{slow.url}/state")[1]["runners"].get(slow_runner), "the slow runner was replaced"

    got = answers["stuck"]
    assert got["status"] >= 500 and got["took"] < STEP_DEADLINE_S + patience(5), got
    log = (stuck.home / "logs" / "supervisor.log").read_text()
    assert (f"{stuck_runner} (pid" in log and "inside one step (prefill step" in log
            and "past its step deadline" in log), log[-2000:]
    runner_log = (stuck.home / "logs" / f"{stuck_runner}.log").read_text()
    assert "long_step" not in runner_log  # flight entries go to the bus, not the log
    print(f"slow first step answered in {answers['slow']['took']:.1f}s; the stuck one failed in "
          f"{got['took']:.1f}s: {got['body']['error']['message']}")
