"""Admin verbs, whole-node restart in place, the tap, and bad input on every local socket."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from typing import Any

import zmq

from skulk.node import exitcodes
from skulk.supervisor.tree import ROLES
from skulk.wire import endpoints
from skulk.wire.events import ServiceStatus
from skulk.wire.sockets import make_socket, publish
from skulk.wire.topics import EVT_SERVICE
from tests.integration.harness import BusWatcher
from tests.integration.patience import patience


def skulk(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "skulk.scripts.cli", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_admin_restart_replaces_the_node_in_place(nodes):
    node = nodes()
    before = node.status()
    t0 = time.monotonic()
    out = skulk("admin", "restart", "--home", str(node.home), "--wait", "30")
    took = time.monotonic() - t0
    assert out.returncode == 0, out.stdout + out.stderr + node.log_tail(60)
    print(f"admin restart: node back and ready in {took:.3f}s; {out.stdout.splitlines()[0]}")
    assert "same pid" in out.stdout
    reply = node.wait_ready(timeout=10)
    assert reply.root_pid == node.pid and node.proc.poll() is None
    after = {c.id: c for c in reply.children}
    for role in ROLES:
        assert after[role].state == "running"
        assert after[role].pid != before[role].pid
    assert "restarting in place" in node.log_tail(80)


def test_admin_restart_of_one_role_and_status_cli(nodes):
    node = nodes()
    before = node.status()
    out = skulk("admin", "restart", "master", "--home", str(node.home))
    assert out.returncode == 0 and "restarting master" in out.stdout
    reply = node.wait_ready("master", min_restarts=1, timeout=10)
    after = {c.id: c for c in reply.children}
    assert after["master"].pid != before["master"].pid
    assert after["bus"].pid == before["bus"].pid
    status = skulk("admin", "status", "--home", str(node.home))
    assert status.returncode == 0
    for role in ROLES:
        assert role in status.stdout
    bad = skulk("admin", "restart", "nosuchrole", "--home", str(node.home))
    assert bad.returncode == 1 and "no child named" in bad.stdout


def test_admin_stop_exits_clean(nodes):
    node = nodes()
    out = skulk("admin", "stop", "--home", str(node.home))
    assert out.returncode == 0 and "stopping" in out.stdout
    assert node.proc.wait(timeout=patience(30)) == exitcodes.CLEAN
    assert node.group_pids() == []


def test_admin_on_a_missing_node_fails_fast(tmp_path):
    out = skulk("admin", "status", "--home", str(tmp_path / "none"), "--timeout", "0.5", timeout=30)
    assert out.returncode == 2 and "no answer" in out.stderr


def test_tap_shows_every_role(nodes):
    node = nodes()
    out = skulk("tap", "--home", str(node.home), "--json", "--duration", "5")
    records = [json.loads(line) for line in out.stdout.splitlines()]
    roles = {r["fields"]["role"] for r in records if r.get("type") == "event.service_status"}
    print(f"tap: {len(records)} messages in 5s from roles {sorted(roles)}")
    assert roles == set(ROLES)
    assert all(r["topic"].startswith("evt.") for r in records)


def test_frozen_tap_does_not_slow_the_node(nodes):
    node = nodes(config={"heartbeat": {"interval_s": 0.25, "liveness": 3}})
    tap = subprocess.Popen([sys.executable, "-m", "skulk.scripts.cli", "tap", "--home",
                            str(node.home), "--duration", "60"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL)
    watcher = BusWatcher(node, EVT_SERVICE.prefix + b"bus")  # not the flood's topic
    ctx: zmq.Context[Any] = zmq.Context.instance()
    flood = make_socket(ctx, zmq.PUB, hwm=100000,
                        connect=endpoints.bus_in(endpoints.run_dir(node.home.resolve())))
    try:
        watcher.wait_for(lambda m: True, 10)  # the bus is publishing to subscribers
        tap.send_signal(signal.SIGSTOP)
        sent, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < 3.0:
            for _ in range(500):
                publish(flood, EVT_SERVICE, ServiceStatus(role="flood", child_id="flood", pid=0,
                                                          seq=sent, uptime_s=0.0, detail="x" * 200),
                        suffix="flood")
                sent += 1
        # A live subscriber still gets the real roles' status while the tap is frozen.
        got = watcher.wait_for(lambda m: isinstance(m, ServiceStatus) and m.role == "bus", 15)
        assert got.role == "bus"
        status = node.status()
        print(f"frozen tap: {sent} flood messages in 3s, no role restarted")
        assert all(status[r].restarts == 0 for r in ROLES)
    finally:
        flood.close(0)
        watcher.close()
        tap.kill()
        tap.wait(timeout=patience(10))


def test_bad_frames_on_local_sockets_are_rejected_and_survived(nodes):
    node = nodes()
    run = endpoints.run_dir(node.home.resolve())
    ctx: zmq.Context[Any] = zmq.Context.instance()
    # Garbage to the admin socket: answered with a typed error, not a hang.
    req = make_socket(ctx, zmq.REQ, connect=endpoints.supervisor_control(run))
    req.send(b"\xc1garbage")
    assert req.poll(5000, zmq.POLLIN)
    from skulk.wire.codec import decode

    reply = decode(req.recv())
    assert reply.ok is False and "bad request" in reply.message
    req.close(0)
    # Garbage, wrong types and an oversized frame to the notify socket and the bus.
    push = make_socket(ctx, zmq.PUSH, connect=endpoints.supervisor_notify(run))
    pub = make_socket(ctx, zmq.PUB, connect=endpoints.bus_in(run))
    import msgpack

    wrong = msgpack.packb({"t": "control.heartbeat", "v": 1, "b": {"child_id": 5, "pid": "x", "seq": 1}})
    for frame in (b"junk", wrong, b"\x00" * (9 * 1024 * 1024)):
        push.send(frame)
        pub.send_multipart([b"evt.service.junk", frame])
    # Garbage to the cluster port (TCP, as from another machine).
    dealer = make_socket(ctx, zmq.DEALER, connect=f"tcp://127.0.0.1:{node.cluster_port}")
    dealer.send(b"not a skulk frame")
    # The node answers, and nothing restarted.
    reply = node.wait_ready(timeout=5)
    assert all(c.restarts == 0 for c in reply.children)
    for sock in (push, pub, dealer):
        sock.close(0)
    assert "bad frame" in node.log_tail(60)


def test_config_errors_and_second_node_on_same_home(nodes, tmp_path):
    bad_home = tmp_path / "bad"
    bad_home.mkdir()
    (bad_home / "skulk.yaml").write_text("heartbeat:\n  interval_s: fast\n")
    out = skulk("run", "--home", str(bad_home), "--api-port", "1", "--cluster-port", "3")
    assert out.returncode == exitcodes.CONFIG_ERROR
    assert "heartbeat.interval_s" in out.stderr
    (bad_home / "skulk.yaml").write_text("nosuchsection: {}\n")
    out = skulk("run", "--home", str(bad_home))
    assert out.returncode == exitcodes.CONFIG_ERROR and "unknown section" in out.stderr

    node = nodes()
    out = skulk("run", "--home", str(node.home), "--api-port", "1", "--cluster-port", "3")
    assert out.returncode == exitcodes.BOOT_FAILURE
    assert "already running" in out.stderr
    assert node.wait_ready(timeout=5).ok
