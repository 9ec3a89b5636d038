"""`GET`/`PUT /config` and the cluster-wide `skulk.yaml`: validation names the key, which changes
need a restart, secrets never leave a node and survive a synced write, the leader's command ->
event, the replicated value, and the master's file writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from skulk.cluster.reducer import apply
from skulk.cluster.state import IndexedEvent, State
from skulk.node import config, config_file
from skulk.node.config import ConfigError
from skulk.services.api.admin.config import config_json
from skulk.services.master.commands import handle
from skulk.services.master.config_sync import ConfigFile, set_config, synced_file, to_write
from skulk.services.master.replication import seed
from skulk.supervisor.tree import role_args
from skulk.wire import codec
from skulk.wire.cluster import ForwardCommand
from skulk.wire.commands import CommandAccepted, CommandRejected
from skulk.wire.config_sync import MAX_CONFIG_BYTES, ClusterConfig, ConfigChanged, SetConfig


def cfg(version: int, text: str = "runner: {max_batch: 8}\n", writer: str = "n1") -> ClusterConfig:
    return ClusterConfig(version=version, yaml=text, writer=writer, when=1.0)


# ---- validation: the node's own, naming the key --------------------------------------------

@pytest.mark.parametrize("body,needle", [
    ({"runner": {"max_batchx": 3}}, "unknown key runner.max_batchx"),
    ({"runner": {"max_batch": "8"}}, "runner.max_batch: expected int"),
    ({"api": {"keepalive_s": True}}, "api.keepalive_s"),
    ({"bogus": {}}, "unknown section 'bogus'"),
    ({"supervisor": {"intensity": 3, "extra": 1}}, "unknown key supervisor.extra"),
    ({"node": "x"}, "section 'node' must be a mapping"),
    ({"runner": {"max_batch": 0}}, "runner.max_batch must be in"),
    ({"runner": {"kv_tokens": 100}}, "runner.kv_tokens must be 0"),
    ({"runner": {"kv_tokens": 32768}}, "placement counts 16384"),
    ({"hf_token": 5}, "hf_token: expected str"),
    (["a"], "top level must be a mapping"),
])
def test_a_bad_put_is_a_config_error_naming_the_key(body, needle):
    with pytest.raises(ConfigError, match=needle):
        config_file.prepare_put(body, {})


def test_the_same_validation_as_the_node_at_start(tmp_path: Path):
    path = tmp_path / "skulk.yaml"
    path.write_text("runner: {max_batchx: 3}\n")
    with pytest.raises(ConfigError, match="unknown key runner.max_batchx"):
        config.load(home=tmp_path, config_path=path, env={})
    path.write_text("hf_token: abc\nrunner: {max_batch: 8}\n")
    loaded = config.load(home=tmp_path, config_path=path, env={})
    assert loaded.hf_token == "abc" and loaded.max_batch == 8 and "abc" not in repr(loaded)


def test_body_is_the_config_or_wrapped_in_config():
    assert config_file.config_body({"config": {"runner": {}}}) == {"runner": {}}
    assert config_file.config_body({"runner": {}}) == {"runner": {}}
    assert config_file.config_body({"config": {}, "runner": {}}) == {"config": {}, "runner": {}}


def test_too_large_is_refused():
    with pytest.raises(ConfigError, match="larger than"):
        config_file.prepare_put({"cluster": {"bootstrap_peers": ["1.2.3.4:5"] * MAX_CONFIG_BYTES}}, {})


# ---- requiresRestart --------------------------------------------------------------------------

def test_requires_restart_is_decided_per_section():
    assert not config_file.requires_restart(set())
    for section in ("node", "cluster", "runner", "api", "heartbeat", "children", "tracing"):
        assert config_file.requires_restart({f"{section}.x"}), section
    assert config_file.requires_restart({"supervisor", "hf_token"})
    assert not config_file.requires_restart({"something_live.x"})  # a section not read at start


def test_changed_settings_compare_effective_values():
    old = {"runner": {"max_batch": 8}}
    assert config_file.changed_settings(old, {"runner": {"max_batch": 8}}) == set()
    # Writing out a default changes nothing; dropping a setting back to its default does.
    assert config_file.changed_settings({}, {"node": {"api_port": 52415}}) == set()
    assert config_file.changed_settings(old, {}) == {"runner.max_batch"}
    assert config_file.changed_settings(old, {"tracing": {"retention_days": 5}}) == {
        "runner.max_batch", "tracing.retention_days"}
    assert config_file.changed_settings({}, {"supervisor": {"intensity": 4, "period_s": 60}}) == {"supervisor"}
    _, changed = config_file.prepare_put({"runner": {"max_batch": 8}}, old)
    assert not config_file.requires_restart(changed)
    _, changed = config_file.prepare_put({"runner": {"max_batch": 9}}, old)
    assert config_file.requires_restart(changed)


# ---- secrets ------------------------------------------------------------------------------

def test_secrets_are_stripped_at_any_depth():
    data = {"hf_token": "t", "api": {"keys": ["k1"], "workers": 2}, "store": {"upload_token": "u"},
            "runner": {"max_batch": 4}}
    assert config_file.strip_secrets(data) == {"api": {"workers": 2}, "store": {}, "runner": {"max_batch": 4}}
    assert config_file.secrets_of(data) == {"hf_token": "t", "api": {"keys": ["k1"]},
                                            "store": {"upload_token": "u"}}
    assert data["hf_token"] == "t"  # the input is not changed


def test_a_put_keeps_the_secrets_it_omits_and_sets_those_it_gives():
    old = {"hf_token": "old", "runner": {"max_batch": 4}}
    new, _ = config_file.prepare_put({"runner": {"max_batch": 8}}, old)
    assert new == {"runner": {"max_batch": 8}, "hf_token": "old"}
    new, _ = config_file.prepare_put({"hf_token": "new"}, old)
    assert new == {"hf_token": "new"}
    new, _ = config_file.prepare_put({"hf_token": None}, old)  # an explicit null clears it
    assert new == {"hf_token": None}


def test_a_synced_config_keeps_the_nodes_own_secrets():
    local = {"hf_token": "mine", "api": {"keys": ["k"], "workers": 3}}
    synced = cfg(2, "hf_token: theirs\napi: {workers: 1}\nrunner: {max_batch: 8}\n")
    assert synced_file(synced, local) == {"api": {"workers": 1, "keys": ["k"]},
                                          "runner": {"max_batch": 8}, "hf_token": "mine"}
    assert synced_file(cfg(3, "runner: {}\n"), local) == {"runner": {}, "hf_token": "mine",
                                                          "api": {"keys": ["k"]}}
    assert synced_file(cfg(4, ""), {}) == {}


def test_get_config_answer_never_shows_secrets(tmp_path: Path):
    path = tmp_path / "skulk.yaml"
    assert config_json(None, path, None, False) == {
        "config": {}, "configPath": str(path), "fileExists": False,
        "effective": {"kv_cache_backend": "default", "has_hf_token": False,
                      "cluster_config_version": 0, "cluster_config_from": ""}}
    path.write_text("x")
    got = config_json({"hf_token": "hf_SECRET", "runner": {"max_batch": 2}}, path, cfg(3), False)
    assert got["config"] == {"runner": {"max_batch": 2}} and got["fileExists"]
    assert got["effective"]["has_hf_token"] and got["effective"]["cluster_config_version"] == 3
    assert "hf_SECRET" not in str(got)


# ---- the leader: command -> event; the replicated value ----------------------------------------

def test_leader_turns_set_config_into_the_next_version():
    state = State(session="s", last_event_applied_idx=4)
    cmd = SetConfig(command_id="c1", yaml="hf_token: leak\nrunner: {max_batch: 8}\n", writer="n2")
    reply, events = set_config(state, cmd, now=7.0)
    assert isinstance(reply, CommandAccepted) and reply.command_id == "c1"
    (event,) = events
    assert isinstance(event, ConfigChanged)
    assert event.config.version == 1 and event.config.writer == "n2" and "leak" not in event.config.yaml
    assert yaml.safe_load(event.config.yaml) == {"runner": {"max_batch": 8}}
    state = apply(state, IndexedEvent(idx=5, session="s", event=event))
    assert state.config == event.config
    _, (second,) = set_config(state, cmd, now=8.0)
    assert second.config.version == 2
    # Through the dispatcher, as the master runs it.
    outcome = handle(state, cmd, lambda: "id", 0.0)
    assert isinstance(outcome.reply, CommandAccepted) and outcome.events[0].config.version == 2


@pytest.mark.parametrize("text,needle", [
    ("runner: {max_batchx: 1}\n", "runner.max_batchx"),
    ("node: [\n", "not valid YAML"),
    ("- a\n", "top level must be a mapping"),
    ("x" * (MAX_CONFIG_BYTES + 1), "larger than"),
])
def test_leader_refuses_an_invalid_config_with_422(text, needle):
    reply, events = set_config(State(), SetConfig(command_id="c", yaml=text, writer="n"), now=1.0)
    assert isinstance(reply, CommandRejected) and reply.status == 422 and needle in reply.message
    assert events == []


def test_the_config_survives_a_new_session_and_the_wire():
    state = State(session="s", config=cfg(3))
    assert seed(state, "s2", "n9").config == cfg(3)  # a new leader keeps it
    assert codec.decode(codec.encode(state)) == state
    fwd = ForwardCommand(node_id="n1", command=SetConfig(command_id="c", yaml="{}", writer="n1"))
    assert codec.decode(codec.encode(fwd)) == fwd


def test_a_node_writes_a_config_once_per_version():
    assert not to_write(None, None)
    assert to_write(cfg(1), None)
    assert not to_write(cfg(1), cfg(1))
    assert to_write(cfg(2), cfg(1))
    assert to_write(cfg(1, writer="other"), cfg(1))  # two sessions merged: another version 1


# ---- the master's file ---------------------------------------------------------------------

def test_config_file_sync_writes_keeps_secrets_and_skips_equal_content(tmp_path: Path):
    path = tmp_path / "skulk.yaml"
    path.write_text("hf_token: mine\nrunner: {max_batch: 4}\n")
    path.chmod(0o640)
    sync = ConfigFile(str(path), tmp_path / "elsewhere")
    sync.sync(State())  # no cluster config yet: the node's own file stays
    assert path.read_text() == "hf_token: mine\nrunner: {max_batch: 4}\n"
    sync.sync(State(config=cfg(1)))
    assert yaml.safe_load(path.read_text()) == {"runner": {"max_batch": 8}, "hf_token": "mine"}
    assert path.stat().st_mode & 0o777 == 0o640 and [p.name for p in tmp_path.iterdir()] == ["skulk.yaml"]
    mtime = path.stat().st_mtime_ns
    sync.sync(State(config=cfg(2)))  # same content as the file: nothing written
    assert path.stat().st_mtime_ns == mtime
    path.write_text("runner: {max_batch: 1}\n")  # edited by hand: a version already written stays
    sync.sync(State(config=cfg(2)))
    assert path.read_text() == "runner: {max_batch: 1}\n"


def test_config_file_sync_creates_a_missing_file(tmp_path: Path):
    sync = ConfigFile("", tmp_path)
    sync.sync(State(config=cfg(1, "")))
    assert (tmp_path / "skulk.yaml").is_file() and config_file.read(tmp_path / "skulk.yaml") == {}
    assert (tmp_path / "skulk.yaml").stat().st_mode & 0o777 == 0o600


def test_restore_puts_back_the_old_file_or_none(tmp_path: Path):
    path = tmp_path / "skulk.yaml"
    config_file.write(path, {"runner": {"max_batch": 2}})
    config_file.restore(path, "# mine\nrunner: {}\n")
    assert path.read_text() == "# mine\nrunner: {}\n"
    config_file.restore(path, None)
    assert not path.exists()
    assert config_file.read(path) is None


def test_master_and_api_get_the_file_the_node_started_with(tmp_path: Path):
    (tmp_path / "other.yaml").write_text("{}\n")
    own = config.load(home=tmp_path, config_path=tmp_path / "other.yaml", env={})
    for role in ("master", "api"):
        args = role_args(own, role, "n1")
        assert args[args.index("--config-file") + 1] == str(tmp_path / "other.yaml")
    plain = config.load(home=tmp_path, env={})
    args = role_args(plain, "master", "n1")
    assert args[args.index("--config-file") + 1] == str(tmp_path.resolve() / "skulk.yaml")
