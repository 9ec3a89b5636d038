"""Structured logs: the JSON formatter, the request-id context, the `logging` section, and
how every process gets its settings."""

from __future__ import annotations

import io
import json
import logging
import logging.handlers
import sys
from pathlib import Path

import pytest

from skulk.node import config, logctx, logsetup
from skulk.node.logsetup import JsonFormatter, LogSettings
from skulk.node.role_args import ChildArgs
from skulk.supervisor.child import child_argv
from skulk.supervisor.spec import ChildSpec, SupervisorSpec
from skulk.supervisor.tree import build_tree, log_settings

FIELDS = {"time", "level", "node", "role", "pid", "logger", "message"}


def lines_of(emit) -> list[dict]:
    """What `emit(logger)` logs, through a JSON handler, one parsed object per line."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter("n1", "runner-abc"))
    logger = logging.getLogger("skulk.test.json")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        emit(logger)
    finally:
        logger.removeHandler(handler)
    text = out.getvalue()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_a_json_line_has_every_field():
    [line] = lines_of(lambda log: log.warning("hello %s\nsecond line", "world"))
    assert FIELDS <= set(line)
    assert line["level"] == "WARNING" and line["node"] == "n1" and line["role"] == "runner-abc"
    assert line["logger"] == "skulk.test.json" and line["message"] == "hello world\nsecond line"
    assert isinstance(line["pid"], int)
    assert line["time"].endswith("Z") and len(line["time"]) == len("2024-01-02T03:04:05.678Z")
    assert "task_id" not in line and "command_id" not in line and "exception" not in line


def test_the_bound_ids_appear_inside_bind_only():
    def emit(log: logging.Logger) -> None:
        log.info("before")
        with logctx.bind(task_id="t1", command_id="c1"):
            log.info("inside")
            with logctx.bind(task_id="t2"):
                log.info("nested")
        log.info("after")

    before, inside, nested, after = lines_of(emit)
    assert "task_id" not in before and "command_id" not in before
    assert (inside["task_id"], inside["command_id"]) == ("t1", "c1")
    assert (nested["task_id"], nested["command_id"]) == ("t2", "c1")
    assert "task_id" not in after and "command_id" not in after
    assert logctx.current() == {}


def test_bind_skips_empty_ids_and_extra_wins():
    def emit(log: logging.Logger) -> None:
        with logctx.bind(task_id="", command_id="c1"):
            log.info("one")
            log.info("two", extra={"task_id": "t9"})

    one, two = lines_of(emit)
    assert "task_id" not in one and one["command_id"] == "c1"
    assert two["task_id"] == "t9"


def test_an_exception_carries_its_traceback_as_a_string():
    def emit(log: logging.Logger) -> None:
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("it failed")

    [line] = lines_of(emit)
    assert line["level"] == "ERROR" and line["message"] == "it failed"
    assert isinstance(line["exception"], str)
    assert "Traceback" in line["exception"] and "ValueError: boom" in line["exception"]


def test_setup_writes_json_to_stdout_only_when_enabled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logsetup.setup("api", tmp_path / "logs", settings=LogSettings(json=True, node="n1", file_mb=1, files=2))
        logging.getLogger("skulk.x").info("json on")
        logsetup.setup("api", tmp_path / "logs")
        logging.getLogger("skulk.x").info("json off")
        files = [h for h in root.handlers if isinstance(h, logging.handlers.RotatingFileHandler)]
        assert [(h.maxBytes, h.backupCount) for h in files] == [(10 * 1024 * 1024, 5)]
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:], root.level = saved
    [line] = [json.loads(x) for x in out.getvalue().splitlines()]
    assert line["message"] == "json on" and line["role"] == "api" and line["node"] == "n1"
    assert "json on" in err.getvalue() and "json off" in err.getvalue()  # stderr as before
    assert "json on" in (tmp_path / "logs" / "api.log").read_text()


def test_the_file_rotates_by_size_keeping_a_bounded_count(tmp_path: Path):
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logsetup.setup("bus", tmp_path, settings=LogSettings(file_mb=1, files=2))
        root.handlers = [h for h in root.handlers if isinstance(h, logging.handlers.RotatingFileHandler)]
        for _ in range(3000):
            logging.getLogger("skulk.x").info("x" * 1000)
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:], root.level = saved
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bus.log", "bus.log.1", "bus.log.2"]
    assert all(p.stat().st_size <= 1024 * 1024 for p in tmp_path.iterdir())


def test_the_logging_section(tmp_path: Path):
    cfg = config.validate({"logging": {"enabled": True, "ingest_url": "http://vl:9428",
                                       "max_file_mb": 20, "max_files": 3}}, tmp_path)
    assert (cfg.log_json, cfg.log_ingest_url, cfg.log_file_mb, cfg.log_files) == (True, "http://vl:9428", 20, 3)
    plain = config.validate({}, tmp_path)
    assert (plain.log_json, plain.log_file_mb, plain.log_files) == (False, 10, 5)
    assert config.yaml_fields()["logging.enabled"] == "log_json"


@pytest.mark.parametrize(("body", "needle"), [
    ({"logging": {"enabled": True, "format": "json"}}, "unknown key logging.format"),
    ({"logging": {"enabled": "yes"}}, "logging.enabled: expected true or false"),
    ({"logging": {"max_files": 0}}, "logging.max_files"),
    ({"logging": {"max_file_mb": 0}}, "logging.max_file_mb"),
    ({"logging": {"ingest_url": 5}}, "logging.ingest_url"),
    ({"logging": True}, "section 'logging' must be a mapping"),
])
def test_the_logging_section_is_strict(tmp_path: Path, body: dict, needle: str):
    with pytest.raises(config.ConfigError, match=needle):
        config.validate(body, tmp_path)


def test_skulk_logging_external_turns_json_on(tmp_path: Path):
    (tmp_path / "skulk.yaml").write_text("logging: {enabled: false}\n")
    assert config.load(home=tmp_path, env={"SKULK_LOGGING_EXTERNAL": "1"}).log_json is True
    assert config.load(home=tmp_path, env={"SKULK_LOGGING_EXTERNAL": "off"}).log_json is False
    assert config.load(home=tmp_path, env={}).log_json is False
    with pytest.raises(config.ConfigError, match="SKULK_LOGGING_EXTERNAL"):
        config.load(home=tmp_path, env={"SKULK_LOGGING_EXTERNAL": "maybe"})


def test_every_process_gets_the_settings_as_arguments(tmp_path: Path):
    cfg = config.load(home=tmp_path, env={"SKULK_LOGGING_EXTERNAL": "1"}, overrides={"node_name": "n7"})
    tree = build_tree(cfg, "id1")
    specs = [c for c in tree.children if isinstance(c, ChildSpec)]
    runners = next(c for c in tree.children if isinstance(c, SupervisorSpec))
    assert runners.template is not None and len(specs) == 8
    expected = LogSettings(json=True, node="n7", file_mb=10, files=5)
    assert log_settings(cfg) == expected
    for spec in [*specs, runners.template]:
        argv = child_argv(spec, spec.id, tmp_path, tmp_path, ("--runner-id", "r1"))[3:]  # after `python -m module`
        parsed, rest = ChildArgs.split(argv)
        assert parsed.log == expected and parsed.child_id == spec.id, spec.id
        assert not any(a.startswith("--log-") for a in rest), spec.id  # the role never sees them
        assert rest == [*spec.args, "--runner-id", "r1"], spec.id  # its own arguments, in order
    assert ChildArgs.split(["--child-id", "x", "--title", "x", "--home", "h", "--run-dir", "r"])[0].log \
        == LogSettings()  # a child started by hand logs as before
