"""Config precedence and strictness; fault-injection parsing (the janitor's policy: test_traces.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from skulk.node import config
from skulk.node.role_args import ApiArgs, ChildArgs
from skulk.services.faults import parse
from skulk.supervisor.child import child_argv
from skulk.supervisor.tree import ROLES, build_tree, role_settings
from skulk.wire import curve


def test_defaults(tmp_path: Path):
    cfg = config.load(home=tmp_path, env={})
    assert (cfg.api_port, cfg.cluster_port, cfg.warmup_deadline_s) == (52415, 52416, 300.0)
    assert (cfg.root_budget.intensity, cfg.root_budget.period_s) == (3, 60.0)
    assert (cfg.runners_budget.intensity, cfg.runners_budget.period_s) == (5, 30.0)


def test_precedence_yaml_then_env_then_cli(tmp_path: Path):
    (tmp_path / "skulk.yaml").write_text(
        "node: {api_port: 1000, cluster_port: 2000}\ncluster: {namespace: lab}\n"
        "supervisor: {intensity: 9, period_s: 30}\n")
    cfg = config.load(home=tmp_path, env={"SKULK_API_PORT": "3000", "SKULK_NAMESPACE": "envns",
                                          "SKULK_WARMUP_DEADLINE_SECONDS": "12", "SKULK_RUNNER_THREADS": "1"},
                      overrides={"namespace": "cli", "cluster_port": None})
    assert cfg.api_port == 3000 and cfg.cluster_port == 2000 and cfg.namespace == "cli" and cfg.threads == 1
    assert cfg.root_budget.intensity == 9 and cfg.warmup_deadline_s == 12.0
    assert cfg.config_path == tmp_path / "skulk.yaml"


@pytest.mark.parametrize("text,needle", [
    ("bogus: {}\n", "unknown section"),
    ("node: {nope: 1}\n", "unknown key node.nope"),
    ("node: {api_port: '80'}\n", "node.api_port"),
    ("heartbeat: {interval_s: true}\n", "heartbeat.interval_s"),
    ("cluster: {bootstrap_peers: [1, 2]}\n", "list of strings"),
    ("- a\n- b\n", "mapping"),
    ("node: [\n", "not valid YAML"),
    ("node: {api_port: 70000}\n", "api_port must be"),
    ("node: {api_port: 5000, cluster_port: 4999}\n", "must differ"),
    ("supervisor: {intensity: 3, extra: 1}\n", "intensity and period_s"),
])
def test_bad_config_is_a_clear_error(tmp_path: Path, text: str, needle: str):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(config.ConfigError, match=needle):
        config.load(home=tmp_path, config_path=path, env={})


def test_the_default_output_budget_reaches_the_api_as_its_argument(tmp_path: Path):
    (tmp_path / "skulk.yaml").write_text("api: {max_output_tokens: 512}\n")
    assert config.load(home=tmp_path, env={}).api_max_output_tokens == 512
    cfg = config.load(home=tmp_path, env={"SKULK_MAX_OUTPUT_TOKENS": "256"})
    api = role_settings(cfg, "api", "n1")
    assert isinstance(api, ApiArgs) and api.max_output_tokens == 256
    assert ApiArgs.from_argv(api.to_argv()).max_output_tokens == 256  # what the API process reads
    (tmp_path / "skulk.yaml").write_text("api: {max_output_tokens: 0}\n")
    with pytest.raises(config.ConfigError, match="max_output_tokens"):
        config.load(home=tmp_path, env={})


def test_bad_env_value(tmp_path: Path):
    with pytest.raises(config.ConfigError, match="SKULK_API_PORT"):
        config.load(home=tmp_path, env={"SKULK_API_PORT": "eighty"})


def test_tree_declares_every_role_then_the_runners_supervisor(tmp_path: Path):
    cfg = config.load(home=tmp_path, env={"SKULK_WARMUP_DEADLINE_SECONDS": "42"})
    tree = build_tree(cfg, "n1")
    assert [c.id for c in tree.children] == [*ROLES, "runners"]
    runners = tree.children[-1]
    assert runners.strategy == "simple_one_for_one"
    assert runners.template.args[:2] == ("--warmup-deadline", "42.0")  # the runner enforces it
    assert runners.template.ready_timeout_s == 52.0  # the supervisor's backstop comes after
    assert tree.strategy == "one_for_one" and tree.intensity == 3


def test_fault_spec_parsing():
    assert parse("runner@decode:5=crash, janitor@boot=hang") == {
        ("runner", "decode:5"): "crash", ("janitor", "boot"): "hang"}
    assert parse("") == {}
    with pytest.raises(ValueError):
        parse("runner=crash")



def test_every_child_is_given_the_cluster_key_as_its_argument_not_through_the_environment(tmp_path: Path):
    key = tmp_path / "cluster.key"
    curve.write_key_file(key, curve.keygen())
    cfg = config.load(home=tmp_path, env={"SKULK_CLUSTER_KEY_FILE": str(key)})
    tree = build_tree(cfg, "n1")
    specs = [c for c in tree.children if not hasattr(c, "children")]
    runners = next(c for c in tree.children if hasattr(c, "children"))
    assert {c.key_file for c in specs} == {str(key.resolve())}
    assert runners.template is not None and runners.template.key_file == str(key.resolve())
    argv = child_argv(specs[0], specs[0].id, tmp_path, tmp_path)
    args, _rest = ChildArgs.split(argv[3:])
    assert args.key_file == str(key.resolve())
    open_tree = build_tree(replace(cfg, cluster_key_file=""), "n1")
    assert {c.key_file for c in open_tree.children if not hasattr(c, "children")} == {""}
