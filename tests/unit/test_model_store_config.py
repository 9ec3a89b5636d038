"""`model_store` in skulk.yaml and node names: strict parsing (every error names its key),
defaults, `node_overrides` merging, and the roles' command-line slice."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from skulk.node import config, config_file
from skulk.node.model_store import ModelStoreConfig, StagingConfig, StoreSlice, is_store_host, staging_for
from skulk.node.role_args import WorkerArgs
from skulk.supervisor.tree import role_args

HOME = Path("/srv/node1")
BASE = {"store_host": "storebox", "store_path": "/srv/models"}


def load(tmp_path: Path, data: dict[str, Any], env: dict[str, str] | None = None,
         **overrides: Any) -> config.NodeConfig:
    path = tmp_path / "skulk.yaml"
    path.write_text(yaml.safe_dump(data))
    return config.load(home=tmp_path, config_path=path, env=env or {}, overrides=overrides)


def store_of(body: dict[str, Any]) -> ModelStoreConfig:
    store = config.validate({"model_store": body}, HOME).model_store
    assert store is not None
    return store


def test_no_section_means_no_store(tmp_path: Path):
    assert load(tmp_path, {}).model_store is None
    assert config.validate({"model_store": None}, HOME).model_store is None


def test_defaults_follow_upstream_but_stage_under_the_nodes_home():
    store = store_of(dict(BASE))
    assert (store.enabled, store.store_port, store.store_http_host, store.allow_hf_fallback) == \
        (True, 58080, None, True)
    assert store.store_path == Path("/srv/models")
    assert store.staging == StagingConfig(enabled=True, node_cache_path=HOME / "staging",
                                          cleanup_on_deactivate=True, staging_keep_recent_gb=40.0)
    assert store.node_overrides == ()


def test_every_key_is_read():
    store = store_of({**BASE, "enabled": False, "store_http_host": "10.0.0.5", "store_port": 9000,
                      "download": {"allow_hf_fallback": False},
                      "staging": {"enabled": False, "node_cache_path": "~/stage/./x",
                                  "cleanup_on_deactivate": False, "staging_keep_recent_gb": 0}})
    assert (store.enabled, store.store_http_host, store.store_port, store.allow_hf_fallback) == \
        (False, "10.0.0.5", 9000, False)
    assert store.staging.node_cache_path == Path("~/stage/x").expanduser()
    assert store.staging.staging_keep_recent_gb == 0.0 and not store.staging.cleanup_on_deactivate


@pytest.mark.parametrize("body,key", [
    ({**BASE, "bogus": 1}, "unknown key model_store.bogus"),
    ({**BASE, "staging": {"keep": 1}}, "unknown key model_store.staging.keep"),
    ({**BASE, "download": {"hf": True}}, "unknown key model_store.download.hf"),
    ({**BASE, "node_overrides": {"n1": {"stagin": {}}}}, "unknown key model_store.node_overrides.n1.stagin"),
    ({**BASE, "node_overrides": {"n1": {"staging": {"x": 1}}}},
     "unknown key model_store.node_overrides.n1.staging.x"),
    ({"store_host": "storebox"}, "model_store.store_path is required"),
    ({"store_path": "/srv/models"}, "model_store.store_host is required"),
    ({**BASE, "store_path": "models"}, "model_store.store_path: must be an absolute path"),
    ({**BASE, "staging": {"node_cache_path": "/srv/models"}}, "model_store.staging.node_cache_path .* equal to"),
    ({**BASE, "staging": {"node_cache_path": "/srv/models/../models/"}}, "model_store.staging.node_cache_path"),
    ({**BASE, "staging": {"node_cache_path": "/srv/models/staging"}}, "model_store.staging.node_cache_path .* inside"),
    ({**BASE, "staging": {"node_cache_path": "/srv"}}, "model_store.staging.node_cache_path .* a parent of"),
    ({**BASE, "node_overrides": {"n1": {"staging": {"node_cache_path": "/srv/models/n1"}}}},
     "model_store.node_overrides.n1.staging.node_cache_path"),
    ({**BASE, "staging": {"staging_keep_recent_gb": -1}}, "model_store.staging.staging_keep_recent_gb must be >= 0"),
    ({**BASE, "node_overrides": {"n1": {"staging": {"staging_keep_recent_gb": -0.5}}}},
     "model_store.node_overrides.n1.staging.staging_keep_recent_gb"),
    ({**BASE, "staging": {"staging_keep_recent_gb": "lots"}}, "model_store.staging.staging_keep_recent_gb"),
    ({**BASE, "store_port": 0}, "model_store.store_port must be in 1..65535"),
    ({**BASE, "store_port": 70000}, "model_store.store_port must be in 1..65535"),
    ({**BASE, "store_port": "58080"}, "model_store.store_port"),
    ({**BASE, "enabled": "yes"}, "model_store.enabled"),
    ({**BASE, "download": {"allow_hf_fallback": 1}}, "model_store.download.allow_hf_fallback"),
    ({**BASE, "staging": []}, "model_store.staging must be a mapping"),
    ({**BASE, "node_overrides": ["n1"]}, "model_store.node_overrides must be a mapping"),
    ({**BASE, "node_overrides": {"N1": {}, "n1": {}}}, "model_store.node_overrides.n1: another override"),
    ({**BASE, "node_overrides": {7: {}}}, "model_store.node_overrides.7"),
])
def test_a_bad_model_store_is_a_config_error_naming_the_key(tmp_path: Path, body: dict[str, Any], key: str):
    with pytest.raises(config.ConfigError, match=key) as err:
        load(tmp_path, {"model_store": body})
    assert str(tmp_path / "skulk.yaml") in str(err.value)  # and the file
    with pytest.raises(config.ConfigError, match=key):  # PUT /config checks the same way
        config_file.prepare_put({"model_store": body}, {})


def test_the_default_staging_dir_may_not_be_inside_the_store(tmp_path: Path):
    with pytest.raises(config.ConfigError, match="model_store.staging.node_cache_path"):
        load(tmp_path, {"model_store": {"store_host": "x", "store_path": str(tmp_path)}})


def test_the_store_hosts_port_must_not_be_one_of_its_own(tmp_path: Path):
    body = {"store_host": "Box", "store_path": "/srv/models", "store_port": 52415}
    with pytest.raises(config.ConfigError, match="model_store.store_port 52415 is this store host's node.api_port"):
        load(tmp_path, {"model_store": body}, node_name="box")
    assert load(tmp_path, {"model_store": body}, node_name="other").model_store is not None


def test_node_overrides_merge_by_node_id_first_then_by_name():
    store = store_of({**BASE, "staging": {"staging_keep_recent_gb": 10},
                      "node_overrides": {"Mini": {"staging": {"staging_keep_recent_gb": 0}},
                                         "abc123": {"staging": {"cleanup_on_deactivate": False,
                                                                "node_cache_path": "/fast/stage"}}}})
    base = store.staging
    assert staging_for(store, ("other",), "zzz") == base
    by_name = staging_for(store, ("mini",), "zzz")  # names match without case
    assert by_name == StagingConfig(enabled=True, node_cache_path=base.node_cache_path,
                                    cleanup_on_deactivate=True, staging_keep_recent_gb=0.0)
    by_id = staging_for(store, ("mini",), "abc123")  # the id wins over the name
    assert by_id == StagingConfig(enabled=True, node_cache_path=Path("/fast/stage"),
                                  cleanup_on_deactivate=False, staging_keep_recent_gb=10.0)


def test_store_host_is_a_node_name_or_a_node_id():
    store = store_of(dict(BASE, store_host="StoreBox"))
    assert is_store_host(store, ("storebox",), "n1") and not is_store_host(store, ("other",), "n1")
    assert is_store_host(store_of(dict(BASE, store_host="abc123")), ("other",), "abc123")
    # a node given no name: by the name it starts under and by its derived name
    assert is_store_host(store, ("mini", "StoreBox-1a2b"), "n1") is False
    assert is_store_host(store_of(dict(BASE, store_host="mini-1a2b")), ("mini", "mini-1A2B"), "n1")


def store_through_argv(store: StoreSlice | None, home: Path = HOME) -> ModelStoreConfig | None:
    """`store` as a role gets it: written on a command line, read back, as its settings."""
    back = WorkerArgs.from_argv(WorkerArgs(node_id="n", store=store).to_argv()).store
    return back.config(home) if back else None


def test_the_roles_get_this_nodes_settings_with_the_override_applied():
    store = store_of({**BASE, "store_http_host": "10.0.0.5", "store_port": 9000,
                      "download": {"allow_hf_fallback": False},
                      "node_overrides": {"mini": {"staging": {"staging_keep_recent_gb": 0.5,
                                                              "cleanup_on_deactivate": False}}}})
    argv = StoreSlice.for_node(store, ("mini",), "n1").to_argv()  # type: ignore[union-attr]
    assert "--staging-keep-gb" in argv and "node_overrides" not in " ".join(argv)
    back = store_through_argv(StoreSlice.for_node(store, ("mini",), "n1"))
    assert back == ModelStoreConfig(store_host="storebox", store_path=Path("/srv/models"),
                                    staging=staging_for(store, ("mini",), "n1"), store_http_host="10.0.0.5",
                                    store_port=9000, allow_hf_fallback=False)
    other = store_through_argv(StoreSlice.for_node(store, ("other",), "n2"))
    assert other is not None and other.staging == store.staging


def test_no_store_or_a_disabled_one_passes_nothing():
    assert StoreSlice.for_node(None, ("n",), "i") is None and store_through_argv(None) is None
    assert StoreSlice.for_node(store_of({**BASE, "enabled": False}), ("n",), "i") is None
    assert not any(a.startswith(("--store", "--staging")) for a in WorkerArgs(node_id="n").to_argv())


def test_store_worker_and_gossip_get_the_name_and_the_store(tmp_path: Path):
    cfg = load(tmp_path, {"model_store": BASE}, node_name="n1")
    for role in ("store", "worker", "api"):
        args = role_args(cfg, role, "id1")
        assert args[args.index("--store-host") + 1] == "storebox"
        assert args[args.index("--is-store-host") + 1] == "0"  # decided once, for every role
        assert args[args.index("--staging-root") + 1] == str(tmp_path.resolve() / "staging")
    gossip = role_args(cfg, "gossip", "id1", started=123.5)
    assert gossip[gossip.index("--node-name") + 1] == "n1" and gossip[gossip.index("--started") + 1] == "123.5"
    host = role_args(load(tmp_path, {"model_store": {**BASE, "store_host": "N1"}}, node_name="n1"), "worker", "id1")
    assert host[host.index("--is-store-host") + 1] == "1"
    plain = load(tmp_path, {}, node_name="n1")
    assert "--store-host" not in role_args(plain, "store", "id1") + role_args(plain, "worker", "id1") \
        + role_args(plain, "api", "id1")


def test_a_model_store_change_requires_a_restart():
    changed = config_file.changed_settings({}, {"model_store": BASE})
    assert changed == {"model_store"} and config_file.requires_restart(changed)
    same = {"model_store": {**BASE, "store_port": 58080}}  # writing out a default changes nothing
    assert config_file.changed_settings({"model_store": BASE}, same) == set()


def test_node_name_defaults_to_the_host_name_and_yaml_env_cli_override_it(tmp_path: Path):
    assert load(tmp_path, {}).node_name == socket.gethostname()
    assert load(tmp_path, {"node": {"name": "yamlname"}}).node_name == "yamlname"
    env = {"SKULK_NODE_NAME": "envname"}
    assert load(tmp_path, {"node": {"name": "yamlname"}}, env=env).node_name == "envname"
    assert load(tmp_path, {"node": {"name": "yamlname"}}, env=env, node_name="cli").node_name == "cli"


@pytest.mark.parametrize("name", ["", "has space", "-dash-first", "a/b", "x" * 254])
def test_a_bad_node_name_is_a_config_error(tmp_path: Path, name: str):
    with pytest.raises(config.ConfigError, match="node.name"):
        load(tmp_path, {"node": {"name": name}} if name else {}, node_name=name or " ")
