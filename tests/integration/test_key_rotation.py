"""Rotating the cluster key under live traffic fails no request (docs/cluster-key.md).

Three keyed nodes, two of them holding a ready instance of the demo model; two clients stream
short chat completions without pause through a node that is not the one being restarted, as a
load balancer would. The operator's three steps, each made with the CLI (`skulk cluster keygen
--add-to`, `promote`, `retire`), installed on every node and followed by a rolling restart of all
three nodes (`POST /admin/restart?node_id=`, one at a time, each back with its instance ready
before the next). Every node drains before it restarts, and the leader's restart is a failover
that routing waits out (services/api/links/master_client.py). At the end: not one failed request, every node
on the new key only (a raw client with the old key gets no answer from the leader, one with the
new key does), and one cluster.
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from skulk.wire import curve
from skulk.wire.cluster import EventBatch, SnapshotPush
from tests.integration.cluster import FAST, ask_leader, converged, node_args, state_of
from tests.integration.conftest import DEMO_DIR
from tests.integration.harness import Node, wait_until
from tests.integration.patience import patience
from tests.integration.serving import MODEL, http_json

CONFIG = {**FAST, "cluster": {**FAST["cluster"], "election_timeout_s": 1.0, "peer_timeout_s": 4.0},
          "node": {"drain_timeout_s": 15}, "children": {"ready_timeout_s": 60}}
"""A one-second campaign (the default is 3 s) shortens the failover that each leader's restart is.
Three nodes and their clients share this machine's cores: a role may take long to boot (as in the
chaos soak, a 60 s ready deadline), and each runner gets one BLAS thread (`ENV`). A node that has
just restarted boots nine processes and loads its runner at once, and on a loaded 2-core machine
its gossip was seen silent for 1.5 s (the default peer timeout): its peers declared it lost and its
instance went with it. This test is about the key, not about how fast a lost node is noticed: a
peer is declared lost after 4 s of silence here."""
ENV = {"OPENBLAS_NUM_THREADS": "1"}
MAX_TOKENS = 24
PAUSE_S = 0.25
"""Each client waits this long between two requests, as a user would: a request is still in flight
through every drain and restart (one takes longer than the pause), but the clients no longer take
the cores the restarting nodes boot on (unpaced, this test's runners took 133 CPU seconds in a
clean-clone run, 15 % of all the suite's runners, and it was the suite's longest test)."""


def skulk(*args: str | Path) -> str:
    out = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", *map(str, args)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def install(key_file: Path, nodes: dict[str, Path]) -> None:
    """Copy the key file to every node's configured path (atomically: a node's process that
    starts meanwhile reads the old file or the new one, never half of one)."""
    for path in nodes.values():
        tmp = path.with_suffix(".tmp")
        shutil.copy2(key_file, tmp)
        tmp.replace(path)


@dataclass
class Clients:
    """Threads streaming short chat completions, one after another, through `target`."""

    target: Node
    served: int = 0
    spans: list[tuple[float, float]] = field(default_factory=list)  # (sent, ended) of each request that ended well
    longest: float = 0.0  # the slowest request's time (a leader's restart: routing waits for the next)
    failures: list[str] = field(default_factory=list)
    busy: dict[int, Node] = field(default_factory=dict)  # thread -> the node its request goes through
    stop: threading.Event = field(default_factory=threading.Event)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def start(self, count: int) -> list[threading.Thread]:
        threads = [threading.Thread(target=self.client, args=(i,), daemon=True) for i in range(count)]
        for t in threads:
            t.start()
        return threads

    def served_across(self, start: float, end: float) -> int:
        """Requests in flight at some moment from `start` to `end` that ended well (then or later:
        a request waiting for a new leader may end after its old one is back)."""
        with self.cond:
            return sum(sent <= end and ended >= start for sent, ended in self.spans)

    def send_to(self, node: Node, away_from: Node) -> None:
        """New requests go to `node`; returns once no request goes through `away_from`."""
        with self.cond:
            self.target = node
            assert self.cond.wait_for(lambda: away_from not in self.busy.values(), patience(30)), "a request hung"

    def client(self, i: int) -> None:
        n = 0
        while not self.stop.is_set():
            with self.cond:
                node = self.busy[i] = self.target
            sent = time.monotonic()
            error = self.one(node, f"client {i} request {n}: count to ten")
            with self.cond:
                del self.busy[i]
                self.longest = max(self.longest, time.monotonic() - sent)
                self.served += error is None
                if error is None:
                    self.spans.append((sent, time.monotonic()))
                if error is not None:
                    self.failures.append(f"via {node.home.name}: {error}")
                self.cond.notify_all()
            n += 1
            self.stop.wait(PAUSE_S)

    @staticmethod
    def one(node: Node, prompt: str) -> str | None:
        """None when the stream brought all its tokens (greedy: the demo model never stops early),
        its finish reason and `[DONE]`; else what went wrong."""
        conn = http.client.HTTPConnection("127.0.0.1", node.api_port, timeout=60)
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps({
                "model": MODEL, "max_tokens": MAX_TOKENS, "stream": True, "temperature": 0,
                "messages": [{"role": "user", "content": prompt}]}), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                return f"HTTP {resp.status}: {resp.read()[:300]!r}"
            tokens, finish = 0, None
            for line in resp:
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:].strip()
                if payload == b"[DONE]":
                    whole = tokens == MAX_TOKENS and finish == "length"
                    return None if whole else f"{tokens} tokens, finish reason {finish}"
                chunk = json.loads(payload)
                if "error" in chunk:
                    return f"error event: {chunk['error']['message']}"
                finish = chunk["choices"][0].get("finish_reason") or finish
                tokens += not chunk["choices"][0].get("finish_reason")  # one chunk per token, then the end
            return f"the stream ended without [DONE] after {tokens} tokens"
        except (OSError, http.client.HTTPException, ValueError) as exc:
            return f"client: {exc!r}"
        finally:
            conn.close()


def serving_again(watch: Node, node_id: str) -> bool:
    """The node is back in the cluster (no restart mark) and its instance, if it has one, serves."""
    state = state_of(watch) or {}
    if state.get("restartingNodes") or node_id not in state.get("nodeIdentities", {}):
        return False
    for inst in state.get("instances", {}).values():
        shards = next(iter(inst.values()))["shardAssignments"]
        if node_id in shards["nodeToRunner"]:
            rid = shards["nodeToRunner"][node_id]
            return any(k in state["runners"].get(rid, {}) for k in ("RunnerReady", "RunnerRunning"))
    return True


def restart_in_place(via: Node, node: Node, node_id: str, cluster: list[Node]) -> float:
    """`POST /admin/restart?node_id=` through another node; back when its new image serves."""
    old_api = node.status()["api"].pid
    t0 = time.monotonic()
    status, body = http_json(f"{via.url}/admin/restart?node_id={node_id}", b"")
    assert status == 200, body

    wait_until(via, lambda: node.back_in_place(old_api), 60, f"{node.home.name} back in place")
    wait_until(via, lambda: converged(cluster, 3) and serving_again(via, node_id), 60,
               f"{node.home.name} serving again")
    return time.monotonic() - t0


def test_rotating_the_cluster_key_with_rolling_restarts_fails_no_request(nodes, demo_model, tmp_path):
    started = time.monotonic()
    keys = tmp_path / "keys"
    keys.mkdir()
    skulk("cluster", "keygen", "--out", keys / "old.key")
    names = ("a", "b", "c")
    key_paths = {name: tmp_path / f"{name}.cluster.key" for name in names}
    install(keys / "old.key", key_paths)
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    cluster: list[Node] = []
    for name in names:
        config = {**CONFIG, "cluster": {**CONFIG["cluster"], "key_file": str(key_paths[name])}}
        cluster.append(nodes(name, config=config, env=ENV, args=node_args(namespace, cluster[:1]),
                             models={DEMO_DIR: demo_model}))
    wait_until(cluster[0], lambda: converged(cluster, 3), 30, "the keyed cluster forms")
    ids = [http_json(f"{n.url}/node_id")[1] for n in cluster]
    for node_id in ids[:2]:  # an instance on a and one on b: while one restarts, the other serves
        status, body = http_json(f"{cluster[0].url}/place_instance", {
            "model_id": MODEL, "excluded_nodes": [i for i in ids if i != node_id]})
        assert status == 200, body
    for node_id in ids[:2]:
        wait_until(cluster[0], lambda node_id=node_id: serving_again(cluster[0], node_id), 60, "both instances ready")
    print(f"3 keyed nodes, 2 instances ready {time.monotonic() - started:.1f}s after the start")

    clients = Clients(target=cluster[1])
    threads = clients.start(2)
    t0 = time.monotonic()
    restarts: dict[str, tuple[float, float]] = {}  # when each node's restart began and it served again
    steps = (("keygen --add-to", ("cluster", "keygen", "--out", keys / "step1.key", "--add-to", keys / "old.key")),
             ("promote", ("cluster", "promote", keys / "step1.key", "--out", keys / "step2.key")),
             ("retire", ("cluster", "retire", keys / "step2.key", "--out", keys / "step3.key")))
    try:
        for n, (what, args) in enumerate(steps, start=1):
            skulk(*args)
            install(keys / f"step{n}.key", key_paths)
            for i, node in enumerate(cluster):
                via = cluster[(i + 1) % 3]
                clients.send_to(via, away_from=node)
                leader = (converged(cluster, 3) or {}).get("master") == ids[i]
                began = time.monotonic()
                took = restart_in_place(via, node, ids[i], cluster)
                restarts[f"step {n}, {node.home.name}"] = (began, time.monotonic())
                print(f"step {n} ({what}): {node.home.name}{' (the leader)' if leader else ''} drained, "
                      f"restarted and serving again in {took:.1f}s; {clients.served} requests served so far")
    finally:
        clients.stop.set()
        for t in threads:
            t.join(patience(90))
    rotation = time.monotonic() - t0
    print(f"rotation: {rotation:.1f}s, {clients.served} requests served, {len(clients.failures)} failed, the "
          f"slowest in {clients.longest:.2f}s; {time.monotonic() - started:.1f}s in all")
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert not clients.failures, "\n".join(clients.failures)
    # requests were in flight through every restart and each ended well (how many depends on the
    # machine's speed, not on the code)
    served_across = {what: clients.served_across(*span) for what, span in restarts.items()}
    assert len(served_across) == 9 and all(served_across.values()), served_across

    # One cluster, on the new key only.
    formed = wait_until(cluster[0], lambda: converged(cluster, 3), 30, "one cluster")
    leader = cluster[ids.index(formed["master"])]
    assert ask_leader(leader.cluster_port + 1, curve.load_key_file(keys / "old.key")) is None
    answer = ask_leader(leader.cluster_port + 1, curve.load_key_file(keys / "step3.key"))
    assert isinstance(answer, (EventBatch, SnapshotPush))
    for node in cluster:  # each node's last start read the one-key file
        starts = [line for line in (node.home / "logs" / "supervisor.log").read_text().splitlines()
                  if "cluster sockets secured with CurveZMQ" in line]
        assert len(starts) == 4 and starts[-1].endswith("1 key(s))"), starts
