"""`skulk run`: prepare the node's home, take its lock, run the tree, exit or re-exec.

Exit codes follow `exitcodes`. `restart` (admin verb or SIGHUP) stops the tree in order and
then replaces this process image with the same arguments (`os.execv`), so the PID that
launchd/systemd track never changes.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import shutil
import sys
from pathlib import Path

import psutil
from setproctitle import setproctitle

from skulk.node import exitcodes, last_words, logsetup, node_identity
from skulk.node.addresses import is_loopback
from skulk.node.config import NodeConfig
from skulk.supervisor import zygote_fork
from skulk.supervisor.child import DeferredSignals, child_env, metrics_dir
from skulk.supervisor.loop import NodeLoop, child_modules
from skulk.supervisor.tree import build_tree, log_settings
from skulk.wire import curve, endpoints

log = logging.getLogger("skulk.supervisor")

HOME_DIRS = ("models", "logs", "eventlog", "traces")
INPLACE_NODE_ID = "SKULK_INPLACE_NODE_ID"
"""Set only across our own execv: the restarted image keeps the node id."""
INPLACE_RAN_RUNNER = "SKULK_INPLACE_RAN_RUNNER"
"""Set only across our own execv: the node ran a runner, so the new image makes a standby one."""


def prepare_home(cfg: NodeConfig) -> Path:
    """Create the home layout and return the run dir (ipc sockets, lock, pid file)."""
    for name in HOME_DIRS:
        (cfg.home / name).mkdir(parents=True, exist_ok=True)
    run = endpoints.run_dir(cfg.home)
    run.mkdir(parents=True, exist_ok=True, mode=0o700)
    return run


def take_lock(run: Path) -> int | None:
    """One node per home: an exclusive flock on `<run>/skulk.lock` (released at exec/exit)."""
    fd = os.open(run / "skulk.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def fresh_metrics_dir(run: Path) -> None:
    """An empty Prometheus multiprocess directory: the files of a previous run (its pids, its
    counts) must not be merged into this one's."""
    shutil.rmtree(metrics_dir(run), ignore_errors=True)
    metrics_dir(run).mkdir(mode=0o700)


def secure_children(cfg: NodeConfig) -> None:
    """Every child secures its TCP sockets with the cluster key (`wire/curve.py`); without one a
    node on a non-loopback address is open to anyone who reaches it, and says so."""
    if cfg.cluster_key_file:
        path = Path(cfg.cluster_key_file).expanduser().resolve()  # each child gets it (`tree.key_file`)
        log.info("cluster sockets secured with CurveZMQ (key file %s, %d key(s))", path,
                 len(curve.load_key_file(path).keys))
        return
    if not is_loopback(cfg.listen):
        log.warning("OPEN CLUSTER: listening on %s without a cluster key: anyone who reaches this "
                    "node's ports can join its cluster, read its events and send it commands; "
                    "make a key with `skulk cluster keygen --out FILE` and set cluster.key_file "
                    "on every node", cfg.listen)


def run_node(cfg: NodeConfig) -> int:
    inherited = zygote_fork.open_fds() - {0, 1, 2}  # from whoever started us: no object of ours holds one
    setproctitle("skulk: supervisor")
    logsetup.setup("supervisor", cfg.home / "logs", settings=log_settings(cfg))
    try:
        run = prepare_home(cfg)
    except OSError as exc:
        log.error("cannot prepare home %s: %s", cfg.home, exc)
        return exitcodes.CONFIG_ERROR
    lock = take_lock(run)
    if lock is None:
        log.error("another skulk node is already running with home %s", cfg.home)
        return exitcodes.BOOT_FAILURE
    try:
        cfg = node_identity.named(cfg)  # a node given no name: its derived name, made once per home
    except OSError as exc:
        log.error("cannot keep this node's name suffix in %s: %s", cfg.home, exc)
        return exitcodes.CONFIG_ERROR
    logsetup.setup("supervisor", cfg.home / "logs", settings=log_settings(cfg))  # under that name
    try:
        fresh_metrics_dir(run)
        last_words.clear(run)
    except OSError as exc:
        log.error("cannot prepare the metrics directory under %s: %s", run, exc)
        return exitcodes.BOOT_FAILURE
    log.info("node %s starting: home %s, api port %d, cluster port %d, pid %d%s",
             cfg.node_name, cfg.home, cfg.api_port, cfg.cluster_port, os.getpid(),
             f" (given no name: {cfg.derived_name} where {cfg.host_name} is taken)"
             if cfg.derived_name and cfg.node_name != cfg.derived_name else "")
    # New per process start, as upstream's node ids. An in-place restart (execv) is the same
    # process (same PID): it keeps its id, so peers see it come back rather than a new node.
    node_id = os.environ.pop(INPLACE_NODE_ID, "") or secrets.token_hex(8)
    log.info("node id %s", node_id)
    secure_children(cfg)
    if cfg.hf_token:  # upstream: `hf_token` becomes HF_TOKEN (unless set) for every child
        os.environ.setdefault("HF_TOKEN", cfg.hf_token)
    # The process's start time survives an in-place restart (execv) as the node id does: of two
    # live nodes with one name, the one started later refuses to join (services/gossip/names.py).
    started = psutil.Process().create_time()
    had_runner = os.environ.pop(INPLACE_RAN_RUNNER, "") == "1"
    spec = build_tree(cfg, node_id, started)
    with DeferredSignals():  # the environment is final: the zygote starts from what we imported
        zygote = zygote_fork.fork(child_modules(spec), child_env(run), closable=[lock, *inherited])
    loop = NodeLoop(cfg, spec, run, expect_runner=bool(cfg.place) or had_runner, zygote=zygote)
    code = loop.run()
    if code == exitcodes.ESCALATED:
        log.critical("restart budget exhausted; node stopped (exit %d)", code)
    if loop.after_stop == "exec" and code == exitcodes.CLEAN:
        argv = [sys.executable, *sys.orig_argv[1:]]
        log.info("restarting in place: exec %s", " ".join(argv))
        logging.shutdown()
        os.close(lock)
        os.environ[INPLACE_NODE_ID] = node_id
        if loop.ran_runner:
            os.environ[INPLACE_RAN_RUNNER] = "1"
        os.execv(sys.executable, argv)
    log.info("node stopped (%s)", exitcodes.describe(code))
    return code
