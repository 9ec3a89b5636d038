"""Eviction of staged copies (pure): one policy, three triggers."""

from __future__ import annotations

from skulk.node.staged import Staged
from skulk.services.worker.eviction import doomed

GB = 1024 ** 3
COPIES = [Staged("a/old", 10 * GB, 100.0), Staged("a/mid", 10 * GB, 200.0), Staged("a/new", 10 * GB, 300.0)]


def test_strict_evict_on_deactivate_removes_every_copy_not_in_use():
    assert sorted(doomed(COPIES, {"a/mid"}, keep_bytes=0)) == ["a/new", "a/old"]


def test_the_budget_keeps_the_most_recently_used_copies():
    assert doomed(COPIES, set(), keep_bytes=20 * GB) == ["a/old"]
    assert doomed(COPIES, set(), keep_bytes=25 * GB) == ["a/old"]  # a copy is kept whole or not at all
    assert doomed(COPIES, set(), keep_bytes=40 * GB) == []


def test_a_copy_in_use_or_a_companion_of_one_is_never_a_candidate():
    used = {"a/new", "a/old"}  # a/old: a/new's companion (wire.staged.in_use_here)
    assert doomed(COPIES, used, keep_bytes=0) == ["a/mid"]
    assert doomed(COPIES, used, keep_bytes=0, purge=True) == ["a/mid"]
    assert doomed(COPIES, used, keep_bytes=0, purge=True, only="a/new") == []


def test_a_purge_ignores_the_budget_and_can_name_one_model():
    assert sorted(doomed(COPIES, set(), keep_bytes=100 * GB, purge=True)) == ["a/mid", "a/new", "a/old"]
    assert doomed(COPIES, set(), keep_bytes=100 * GB, purge=True, only="a/mid") == ["a/mid"]
    assert doomed(COPIES, set(), keep_bytes=100 * GB, purge=True, only="a/none") == []


def test_a_model_directory_names_its_companions_in_skulk_json(tmp_path):
    import json

    import pytest

    from skulk.node.model_cards import card_from_dir
    from skulk.wire.models import ModelDirError
    from tests.fake_models import make_model

    main = make_model(tmp_path, "org--main")
    assert card_from_dir(main).companions == ()
    (main / "skulk.json").write_text(json.dumps({"companions": ["org/drafter"]}))
    assert card_from_dir(main).companions == ("org/drafter",)
    for bad in ({"companions": "org/drafter"}, {"companions": ["no-slash"]}):
        (main / "skulk.json").write_text(json.dumps(bad))
        with pytest.raises(ModelDirError):
            card_from_dir(main)
