"""Prompt-lookup proposals and the greedy acceptance count (pure)."""

from __future__ import annotations

from skulk.services.runner.speculate import accepted, propose


def test_the_longest_recent_ngram_proposes_what_followed_it():
    context = [1, 2, 3, 4, 5, 9, 2, 3, 4, 7, 8, 2, 3, 4]
    assert propose(context, 3) == [7, 8, 2]  # "2 3 4" last seen before at 6..8: then 7, 8, 2
    assert propose(context, 1) == [7]
    assert propose([5, 6, 7, 8], 4) == []  # nothing recurs
    assert propose([1, 2, 1], 4) == [] and propose([1, 2, 1], 4, ngram_min=1) == [2, 1]  # 1-grams: off
    assert propose([], 4) == [] and propose([3], 4) == []


def test_only_the_leading_agreeing_drafts_are_accepted():
    assert accepted([5, 6, 7], [5, 6, 7, 8]) == 3
    assert accepted([5, 6, 7], [5, 9, 7, 8]) == 1
    assert accepted([5], [4, 1]) == 0 and accepted([], [4]) == 0


def test_a_sharded_instance_says_why_it_does_not_speculate():
    from pathlib import Path

    from skulk.services.runner.batch_engine import MlxBatchEngine
    from skulk.services.runner.ring import Ring
    from skulk.services.runner.speculate import SpecMode, SpecSettings

    asked = SpecSettings(SpecMode.PROMPT_LOOKUP, 4, 1)
    ring = Ring(rank=0, hosts=("a:1", "b:2"), sharding="Pipeline", split=(2, 2), hostfile=Path("h"))
    sharded = MlxBatchEngine(Path("m"), ring, 16, 256, 0, spec=asked)
    assert sharded.spec.mode is SpecMode.OFF and sharded.speculation.startswith("off: a sharded instance")
    alone = MlxBatchEngine(Path("m"), None, 16, 256, 0, spec=asked)
    assert alone.spec == asked and alone.speculation == "prompt_lookup x4, up to 1 stream"
    assert MlxBatchEngine(Path("m"), None, 16, 256, 0).speculation == ""


def test_the_mode_is_the_cards_unless_configured(tmp_path):
    import json

    from skulk.services.runner.service import spec_mode
    from skulk.services.runner.speculate import SpecMode

    assert spec_mode("", tmp_path) is SpecMode.OFF
    (tmp_path / "skulk.json").write_text(json.dumps({"runtime": {"assistant_model_repo": "o/small"}}))
    assert spec_mode("", tmp_path) is SpecMode.DRAFTER
    assert spec_mode("off", tmp_path) is SpecMode.OFF and spec_mode("prompt_lookup", tmp_path) is SpecMode.PROMPT_LOOKUP
