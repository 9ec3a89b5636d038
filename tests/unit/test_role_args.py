"""Every role's command line is one dataclass: what the supervisor writes, the role reads back
equal (`node/argv.py`, `node/role_args.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from skulk.node import config
from skulk.node.argv import Argv, from_known_argv, prefixed
from skulk.node.role_args import ChildArgs, RunnerArgs, RunnerPlacement, RunnerSettings, StoreRoleArgs, WorkerArgs
from skulk.supervisor.tree import ROLES, build_tree, role_settings, runner_settings


@dataclass(frozen=True, slots=True, kw_only=True)
class Inner(Argv):
    host: str
    port: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Outer(Argv):
    name: str
    ratio: float = 0.1
    on: bool = False
    path: Path | None = None
    many: tuple[int, ...] = ()
    inner: Inner | None = None
    tagged: Inner = field(default=Inner(host="h"), metadata={"prefix": "t-"})


def test_each_type_is_written_and_read_back_equal():
    args = Outer(name="n", ratio=0.1 + 0.2, on=True, path=Path("/p"), many=(3, 4), inner=Inner(host="x", port=9),
                 tagged=Inner(host="y"))
    argv = args.to_argv()
    assert argv[:6] == ("--name", "n", "--ratio", repr(0.1 + 0.2), "--on", "1")
    assert argv.count("--many") == 2 and "--t-host" in argv and "--host" in argv
    assert Outer.from_argv(argv) == args


def test_none_is_left_out_and_an_absent_group_is_none():
    plain = Outer(name="n")
    assert "--path" not in plain.to_argv() and "--host" not in plain.to_argv()
    assert Outer.from_argv(plain.to_argv()) == plain
    assert Outer.from_argv(["--name", "n", "--port", "5", "--host", "h"]).inner == Inner(host="h", port=5)


@pytest.mark.parametrize("argv", [[], ["--name", "n", "--port", "5"], ["--name", "n", "--on", "yes"],
                                  ["--name", "n", "--unknown", "1"]])
def test_a_missing_bad_or_unknown_flag_is_refused(argv: list[str]):
    with pytest.raises(SystemExit):  # a role refused at boot: BOOT_FAILURE, never half-configured
        Outer.from_argv(argv)


def test_known_flags_are_taken_out_and_the_rest_kept_in_order():
    args, rest = from_known_argv(Inner, ["--x", "1", "--host", "h", "--y", "-2.5", "--port", "3"])
    assert args == Inner(host="h", port=3) and rest == ["--x", "1", "--y", "-2.5"]


def test_prefixed_names_a_nested_groups_flags():
    assert prefixed("log-", None).metadata["prefix"] == "log-"
    child = ChildArgs(child_id="c", title="t", home=Path("/h"), run_dir=Path("/r"))
    assert "--log-json" in child.to_argv() and ChildArgs.split(list(child.to_argv()))[0] == child


def test_every_role_reads_back_what_the_tree_gives_it(tmp_path: Path):
    store = {"store_host": "n1", "store_path": str(tmp_path / "store"),
             "node_overrides": {"n1": {"staging": {"staging_keep_recent_gb": 0.5}}}}
    (tmp_path / "skulk.yaml").write_text(yaml.safe_dump({"model_store": store}))
    cfg = config.load(home=tmp_path, env={}, overrides={"node_name": "n1", "place": ("m",)})
    tree = build_tree(cfg, "id1", started=5.0)
    for role in ROLES:
        settings = role_settings(cfg, role, "id1", started=5.0)
        spec = next(c for c in tree.children if c.id == role)
        if settings is None:
            assert spec.args == (), role  # type: ignore[union-attr]
            continue
        assert type(settings).from_argv(spec.args) == settings, role  # type: ignore[union-attr]
    worker = WorkerArgs.from_argv(next(c for c in tree.children if c.id == "worker").args)  # type: ignore[union-attr]
    assert worker.store is not None and worker.store.is_store_host and worker.store.staging_keep_gb == 0.5
    assert StoreRoleArgs.from_argv(next(c for c in tree.children if c.id == "store").args).serves_store()  # type: ignore[union-attr]


def test_a_runner_reads_its_placement_after_the_nodes_settings(tmp_path: Path):
    cfg = config.load(home=tmp_path, env={"SKULK_WARMUP_DEADLINE_SECONDS": "42"})
    runners = build_tree(cfg, "n1").children[-1]
    place = RunnerPlacement(runner_id="r", instance_id="i", node_id="n1", model_id="m", model_dir=Path("/m"),
                            rank=1, world_size=2, hosts=("10.0.0.1:5000", "10.0.0.2:5001"), split=(10, 12),
                            control="10.0.0.1:4999", embedding=False)
    args = RunnerArgs.from_argv([*runners.template.args, *place.to_argv()])  # type: ignore[union-attr]
    assert args == RunnerArgs(placement=place, settings=runner_settings(cfg))
    assert args.settings.warmup_deadline == 42.0 and RunnerSettings().warmup_deadline == 300.0
