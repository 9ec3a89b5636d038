"""A node given no name: its host name, or its derived name where that is taken, the same at
every start of its home (node/node_identity.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import yaml

from skulk.node import config, node_identity
from skulk.node.config import NODE_NAME


def load(home: Path, **overrides: str) -> config.NodeConfig:
    return config.load(home=home, env={}, overrides=overrides or None)


def test_the_derived_name_is_the_host_name_and_a_suffix_and_always_a_valid_name():
    assert node_identity.derive("Mac-mini", "1a2b") == "Mac-mini-1a2b"
    long = node_identity.derive("h" * 253, "1a2b")
    assert len(long) == 253 and long.endswith("-1a2b") and NODE_NAME.fullmatch(long)


def test_the_suffix_is_made_once_per_home_and_kept(tmp_path: Path):
    first = node_identity.home_suffix(tmp_path)
    assert len(first) == 4 and node_identity.home_suffix(tmp_path) == first
    other = node_identity.home_suffix(tmp_path / "other")  # another home: its own file
    assert (tmp_path / "other" / node_identity.SUFFIX_FILE).read_text().strip() == other
    (tmp_path / node_identity.SUFFIX_FILE).write_text("not hex\n")  # damaged: made again
    again = node_identity.home_suffix(tmp_path)
    assert again != "not hex" and node_identity.home_suffix(tmp_path) == again


def test_a_given_name_is_kept_and_never_gets_a_derived_one(tmp_path: Path):
    cfg = node_identity.named(load(tmp_path, node_name="rack-3"))
    assert (cfg.node_name, cfg.host_name, cfg.derived_name) == ("rack-3", "", "")
    assert node_identity.names(cfg) == ("rack-3",)
    assert not (tmp_path / node_identity.SUFFIX_FILE).exists()


def test_a_node_given_no_name_starts_under_its_host_name_until_it_took_its_derived_one(tmp_path: Path):
    cfg = node_identity.named(load(tmp_path))
    host = cfg.host_name
    assert host and cfg.node_name == host
    derived = node_identity.derive(host, (tmp_path / node_identity.SUFFIX_FILE).read_text().strip())
    assert cfg.derived_name == derived and node_identity.current(cfg) == host
    assert node_identity.names(cfg) == (host, derived)  # config may point at it by either (it names no host)

    node_identity.remember(tmp_path, derived)  # gossip met the holder of the host name
    assert node_identity.current(cfg) == derived
    later = node_identity.named(load(tmp_path))  # the next start begins under it
    assert (later.node_name, later.derived_name) == (derived, derived)
    assert node_identity.names(later) == (derived,)  # the host name is another node's now


def test_a_remembered_name_of_another_host_name_is_not_used(tmp_path: Path):
    node_identity.remember(tmp_path, "elsewhere-1a2b")  # the home was copied from another machine
    cfg = node_identity.named(load(tmp_path))
    assert cfg.node_name == cfg.host_name and node_identity.current(cfg) == cfg.host_name


def test_a_host_name_the_config_points_at_is_kept_as_a_given_name_is(tmp_path: Path):
    host = socket.gethostname()
    for store in ({"store_host": host.upper(), "store_path": str(tmp_path / "s")},
                  {"store_host": "elsewhere", "store_path": str(tmp_path / "s"),
                   "node_overrides": {host: {"staging": {"staging_keep_recent_gb": 0}}}}):
        (tmp_path / "skulk.yaml").write_text(yaml.safe_dump({"model_store": store}))
        cfg = node_identity.named(config.load(home=tmp_path, env={}))
        assert (cfg.node_name, cfg.derived_name) == (host, "")  # a clash refuses it, as a given name
        assert node_identity.names(cfg) == (host,)
