"""The test-only fault injection (`services/faults.py`): what a spec means, and that a `pace`
fault slows every pass through its phase while logging once."""

from __future__ import annotations

import logging
import time

import pytest

from skulk.services import faults


def test_a_spec_names_role_phase_and_action_and_a_bad_one_is_refused():
    assert faults.parse("runner@step=pace:0.01, gossip@boot=slow:2") == {
        ("runner", "step"): "pace:0.01", ("gossip", "boot"): "slow:2"}
    with pytest.raises(ValueError, match="role@phase=action"):
        faults.parse("runner=crash")


def test_a_pace_fault_blocks_each_time_and_is_logged_once(monkeypatch, caplog):
    monkeypatch.setattr(faults, "_FAULTS", {("runner", "step"): "pace:0.02"})
    monkeypatch.setattr(faults, "_PACED", set())
    caplog.set_level(logging.WARNING, logger="skulk.faults")
    t0 = time.monotonic()
    for _ in range(3):
        faults.inject("runner", "step")
    assert time.monotonic() - t0 >= 0.06
    assert len(caplog.records) == 1 and "every step" in caplog.records[0].getMessage()
    faults.inject("runner", "decode:1")  # another phase: nothing
    assert len(caplog.records) == 1
