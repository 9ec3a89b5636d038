"""Chaos soak: 3 real nodes on loopback, concurrent streaming clients, random faults.

    python -m tools.chaos --seconds 600 [--nodes 3] [--clients 6] [--seed N] [--replicas]

Each node runs `skulk run` with its own home, ports and process group; the demo model is placed
as one single-node instance per node plus a Pipeline across two nodes. Clients stream chat
completions from every node's API, each request with its own deadline. At random times one
fault is injected (`chaos_faults.py`: SIGKILL or SIGSTOP/SIGCONT of any role or runner, a
node's whole tree, the master's tree, a root supervisor alone, a whole node frozen); then the
soak waits, under a deadline, until the cluster has converged: the nodes it had to restart are
back, every node's `/state` names the same master and members, the layout is restored (an
instance lost with its node is placed again, as an operator would), the state's instances and
runners agree with the processes that exist, and every node serves a request.

`--replicas` (4 nodes by default): the model as single-node instances on two of the nodes, and
only node kills (`SIGKILL` of a serving node's whole tree, the one whose instance runs the most
streams another node's API holds, where any runs); the soak never places anything after
the start, the leader places a lost replica again (`placement.replace_lost`), and the promise is
stronger: a stream whose instance is lost goes on on the surviving replica (`api.resume`), so no
request may end in an error except one whose own API node was the one killed.

Pass criteria (printed at the end; exit 0 only when all hold, see `chaos_checks.judge`): every
request got its tokens or a retryable error (500/503 in the envelope, an SSE error event, or
a transport error from a node whose processes the fault hit) within the promise (`--promise`,
30 s from the fault, or from the request's start when it began later), none passed its own
deadline (hung), every error fell inside a fault's disturbance window, the cluster converged
after every fault, nothing of a node's tree outlived it, and after the soak no process is left
and no port the nodes listened on is still listening.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tools.chaos_checks import (
    FaultRecord,
    NodeView,
    Verdict,
    agreement_problems,
    cutting_target,
    judge,
    membership_problems,
    mid_answer,
    missing_placements,
    pending_recreations,
    replica_errors,
    replica_placements,
    replica_problems,
)
from tools.chaos_clients import Clients, Targets
from tools.chaos_faults import NODE_LOSS, Kind, Plan, inject, plan_fault
from tools.chaos_nodes import BusTicks, ChaosNode, group_procs, http_json, listening_ports
from tools.chaos_report import report

MODEL = "skulk/demo-tiny"
READY_TIMEOUT_S = 60.0
PEER_TIMEOUT_S = 3.0
AIM_S = 5.0
"""The replicas mode's kill waits at most this long for a stream of another node's API that is
mid-answer (a kill there cuts streams that must go on elsewhere)."""
REPLICA_ANSWERS = (100, 400)
"""The replicas mode's answer lengths (tokens; the other faults' clients ask 16-160): a stream
the kill is aimed at must still run when the kill lands, although the state it is aimed by lags
and a busy machine is slow between that read and the kill."""
AHEAD = 100
"""The kill's aim: a stream whose client has had tokens and asked for at least this many more
(suite runs saw a chosen node's streams all end in the 0.3 s between the read and the kill, and
a stream that had just started cut before its runner admitted it: routed again, not resumed)."""
ORPHAN_WAIT_S = 10.0
"""How long a node's processes may outlive its root (they notice the parent's death at once
through PR_SET_PDEATHSIG, or within a loop tick)."""


@dataclass(frozen=True)
class SoakConfig:
    seconds: float
    root: Path
    nodes: int = 3
    clients: int = 6
    seed: int = 1
    model_dir: Path | None = None  # the demo model (built under `root` when None)
    promise_s: float = 30.0
    request_deadline_s: float = 60.0
    converge_s: float = 150.0
    grace_s: float = 5.0
    gap_s: tuple[float, float] = (2.0, 10.0)  # quiet time between convergence and the next fault
    kinds: tuple[Kind, ...] = tuple(Kind)
    replicas: bool = False  # the model on two nodes, node kills only, no error allowed with a replica left
    min_faults: int = 0  # faults to inject even past `seconds` (a slower machine converges slower)
    out: bool = True  # print progress


class Soak:
    def __init__(self, cfg: SoakConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self.faults: list[FaultRecord] = []
        self.leaked: list[str] = []
        self.restarts: list[str] = []
        self.ports: set[int] = set()
        self.targets = Targets()
        namespace = f"chaos-{cfg.seed}-{uuid.uuid4().hex[:6]}"
        # Three nodes share one machine's cores here (a real node has its own): under the
        # clients' load a restarted node's children boot slower than the default 15 s ready
        # deadline allows, and a node loading a model can starve the others' gossip for longer
        # than the default 1.5 s peer timeout (a node loss nobody injected). Each runner's BLAS
        # gets one thread for the same reason (`chaos_nodes.py`).
        config = {"cluster": {"discovery_port": 0, "peer_timeout_s": PEER_TIMEOUT_S},
                  "children": {"ready_timeout_s": READY_TIMEOUT_S}}
        self.nodes = [ChaosNode(f"n{i}", cfg.root / f"n{i}", namespace, config) for i in range(cfg.nodes)]
        for node in self.nodes:
            node.peers = [n.cluster_port for n in self.nodes if n is not node]
        self.clients: Clients | None = None
        self.ticks: BusTicks | None = None
        self.pending: dict[str, float] = {}  # instance ids placed by the soak -> when (until seen)
        self.t_clients = 0.0  # when the clients started

    def log(self, line: str) -> None:
        if self.cfg.out:
            print(f"[{time.monotonic() - self.t0:7.1f}s] {line}", flush=True)

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> Verdict:
        try:
            self.setup()
            self.loop()
            return self.finish()
        finally:
            self.teardown()

    def setup(self) -> None:
        model_dir = self.cfg.model_dir
        if model_dir is None:
            from skulk.scripts.demo_model import build
            model_dir = build(self.cfg.root / "shared")
        for node in self.nodes:
            (node.home / "models").mkdir(parents=True, exist_ok=True)
            link = node.home / "models" / model_dir.name
            if not link.exists():
                link.symlink_to(model_dir, target_is_directory=True)
            node.start()
        for node in self.nodes:
            if not node.wait_booted(60):
                raise RuntimeError(f"{node.name} did not boot\n{node.log_tail()}")
        self.ticks = BusTicks(self.nodes)
        start = FaultRecord(kind="(start)", node="", target="", at=time.monotonic())
        if not self.converge(start):
            raise RuntimeError(f"the cluster did not form: {start.problems}")
        assert start.converged_at is not None  # `converge` sets it when it returns True
        self.log(f"cluster formed with its layout in {start.converged_at - start.at:.1f}s")
        lengths = {"max_tokens": REPLICA_ANSWERS} if self.cfg.replicas else {}
        self.clients = Clients(self.cfg.clients, MODEL, self.targets, self.cfg.seed,
                               self.cfg.request_deadline_s, **lengths).start()
        self.t_clients = time.monotonic()

    def loop(self) -> None:
        end = self.t_clients + self.cfg.seconds
        while True:
            gap = self.rng.uniform(*self.cfg.gap_s)
            if time.monotonic() + gap >= end and len(self.faults) >= self.cfg.min_faults:
                self.stop.wait(max(0.0, end - time.monotonic()))  # the schedule: the soak's end
                return
            self.stop.wait(gap)  # the schedule: the next fault's time
            views = self.views()
            ids = {v.node_id: v.name for v in views}
            master = ids.get((views[0].state or {}).get("masterNodeId"))
            runners = {n.name: sorted(p.runner_id for p in n.procs() if p.runner_id) for n in self.nodes}
            plan = (self.replica_kill(runners, ids) if self.cfg.replicas
                    else plan_fault(self.rng, runners, master, self.cfg.kinds))
            node = self.node(plan.node)
            fault = FaultRecord(kind=plan.label, node=plan.node, target=plan.target, at=time.monotonic())
            self.faults.append(fault)
            if plan.kind in NODE_LOSS:
                self.targets.set(node.name, None)
            fault.detail = inject(node, plan, self.stop)
            self.log(f"fault {len(self.faults)}: {plan.label} on {plan.node}"
                     f"{' (' + plan.target + ')' if plan.target else ''}: {fault.detail}")
            if not self.converge(fault):
                self.log(f"NOT CONVERGED within {self.cfg.converge_s:.0f}s: {fault.problems}")
                return
            assert fault.converged_at is not None  # `converge` sets it when it returns True
            self.log(f"  converged {fault.converged_at - fault.at:.1f}s after the fault")

    def replica_kill(self, runners: dict[str, list[str]], ids: dict[str | None, str]) -> Plan:
        """A serving node's whole tree, chosen where the kill cuts streams another node's API
        holds mid-answer (tokens sent, `AHEAD` or more to come: `mid_answer`), waited for up to
        `AIM_S`; then where such streams run at all; at random where none runs."""
        assert self.clients is not None
        serving = sorted(n for n, r in runners.items() if r)
        names = {i: n for i, n in ids.items() if i is not None}
        until = time.monotonic() + AIM_S
        while True:
            state = self.any_state()
            aimed = cutting_target(state, names, serving, mid_answer(self.clients.snapshot(), AHEAD))
            best = aimed or cutting_target(state, names, serving)
            if aimed is not None or time.monotonic() >= until or self.stop.is_set():
                break
            self.stop.wait(0.2)  # the schedule: the next read of where streams run
        if best is None:
            self.log("  no stream of another node's API ran: a serving node at random")
            return Plan(Kind.KILL_NODE, self.rng.choice(serving))
        self.log(f"  {best[0]} runs {best[1]} stream(s) another node's API holds"
                 f"{' mid-answer' if aimed is not None else ''}")
        return Plan(Kind.KILL_NODE, best[0])

    def any_state(self) -> dict[str, Any]:
        """The first node's state that answers (one read: the kill is aimed by it, and a read of
        every node's state and processes takes a busy machine longer than a short answer lasts)."""
        for node in self.nodes:
            state = node.state()
            if state:
                return state
        return {}

    def finish(self) -> Verdict:
        assert self.clients is not None
        alive = self.clients.stop(self.cfg.request_deadline_s + 10)
        records = self.clients.snapshot()
        for name in alive:
            self.leaked.append(f"client thread {name} still running")
        for node in self.nodes:
            self.ports |= {node.api_port, node.cluster_port, node.cluster_port + 1}
            code = node.stop()
            if code != 0:
                self.leaked.append(f"{node.name}: orderly stop ended with {code} (None: killed after 30s)")
        for node in self.nodes:
            self.reap(node, "after its orderly stop")
        listening = {c.laddr.port for c in psutil.net_connections(kind="tcp")  # laddr: () when it has no address
                     if c.laddr and c.status == psutil.CONN_LISTEN and c.laddr.port in self.ports and self.ours(c.pid)}
        verdict = judge(records, self.faults, self.cfg.promise_s, self.cfg.grace_s, self.leaked,
                        sorted(listening))
        if self.cfg.replicas:
            verdict.replica_errors = replica_errors(records, self.faults, self.cfg.grace_s)
        if self.cfg.out:
            print(report(verdict, self.cfg, self.faults, self.restarts, time.monotonic() - self.t_clients))
        return verdict

    def ours(self, pid: int | None) -> bool:
        """Whether a listening socket's owner may be one of the nodes' processes (a port from the
        ephemeral range that another program took since is not a leftover)."""
        if pid is None:
            return True
        try:
            return os.getpgid(pid) in {g for n in self.nodes for g in n.groups}
        except ProcessLookupError:
            return False

    def teardown(self) -> None:
        self.stop.set()
        self.targets.close()
        if self.ticks is not None:
            self.ticks.close()
        for node in self.nodes:
            for pgid in node.groups:
                node.kill_group(pgid)

    # -- convergence ------------------------------------------------------------------------

    def node(self, name: str) -> ChaosNode:
        return next(n for n in self.nodes if n.name == name)

    def views(self) -> list[NodeView]:
        return [NodeView(n.name, n.node_id(), n.state(), tuple(p.title for p in n.procs())) for n in self.nodes]

    def reap(self, node: ChaosNode, when: str) -> None:
        """Whatever is left of the node's earlier trees must exit by itself within
        ORPHAN_WAIT_S; what does not is a leak (recorded, then killed)."""
        for pgid, procs in node.leftovers().items():
            live = [psutil.Process(p.pid) for p in procs if psutil.pid_exists(p.pid)]
            _gone, still = psutil.wait_procs(live, timeout=ORPHAN_WAIT_S)
            left = [p for p in group_procs(pgid) if p.pid in {s.pid for s in still}]
            for p in left:
                self.leaked.append(f"{node.name}: '{p.title}' (pid {p.pid}) outlived its root {when}")
            node.kill_group(pgid)

    def revive(self, node: ChaosNode, fault: FaultRecord) -> None:
        """A node whose root is gone (the fault, or its exhausted restart budget): check that
        nothing of its tree is left, then start it again with the same home."""
        code = node.exit_code()
        self.targets.set(node.name, None)
        why = "killed" if code is not None and code < 0 else f"exited {code}"
        self.restarts.append(f"{node.name} ({why})")
        fault.detail += f"; {node.name} root {why}, restarted"
        self.reap(node, f"({why})")
        node.start()
        if not node.wait_booted(60):
            fault.problems.append(f"{node.name} did not boot again")

    def converge(self, fault: FaultRecord) -> bool:
        assert self.ticks is not None
        deadline = time.monotonic() + self.cfg.converge_s
        said = time.monotonic()
        while True:
            for node in self.nodes:
                if not node.running():
                    self.revive(node, fault)
            problems = self.problems()
            if not problems:
                fault.converged_at = time.monotonic()
                for node in self.nodes:
                    self.ports |= listening_ports(node.procs())
                    self.targets.set(node.name, node.api_port)
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                fault.problems = problems
                return False
            if time.monotonic() - said > 20:
                said = time.monotonic()
                self.log(f"  still converging: {problems[:3]}")
            self.ticks.wait(min(left, 2.0))

    def problems(self) -> list[str]:
        views = self.views()
        problems = membership_problems(views)
        if problems:
            return problems
        ids = [v.node_id for v in views if v.node_id]
        state = views[0].state or {}
        self.pending = {i: t for i, t in self.pending.items()
                        if i not in state.get("instances", {}) and time.monotonic() - t < 30}
        if self.cfg.replicas:
            bodies = replica_placements(state, ids, MODEL) if self.clients is None else []
        else:
            bodies = missing_placements(state, ids, MODEL)
        if not self.pending:
            for body in bodies:
                status, reply = http_json(f"{self.nodes[0].url}/place_instance", body, timeout=30)
                if status == 200:
                    self.pending[reply["instance_id"]] = time.monotonic()
                self.log(f"  placed {body}: {status} {reply if status != 200 else reply['instance_id']}")
        if self.pending:
            return [f"placements not in the state yet: {sorted(self.pending)}"]
        if pending := pending_recreations(state):
            return [f"re-creations pending: {pending}"]
        if self.cfg.replicas and (short := replica_problems(state, MODEL)):
            return short
        problems = agreement_problems(views)
        return problems or self.probe()

    def probe(self) -> list[str]:
        """Every node serves a short request."""
        problems = []
        for node in self.nodes:
            body = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "ping"}]}
            status, reply = http_json(f"{node.url}/v1/chat/completions", body, timeout=30)
            if status != 200:
                problems.append(f"{node.name}: probe answered {status} {reply}")
        return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=600.0, help="how long the clients run and faults come")
    p.add_argument("--nodes", type=int, default=None, help="3 (4 with --replicas)")
    p.add_argument("--clients", type=int, default=6)
    p.add_argument("--seed", type=int, default=None, help="the fault schedule's seed (default: random)")
    p.add_argument("--promise", type=float, default=30.0, help="seconds from a fault to a client's error")
    p.add_argument("--keep", action="store_true", help="keep the nodes' homes (logs) even when it passes")
    p.add_argument("--replicas", action="store_true",
                   help="the model on two nodes of four, node kills only; no stream may fail while a replica serves")
    ns = p.parse_args(argv)
    ns.nodes = ns.nodes or (4 if ns.replicas else 3)
    seed = ns.seed if ns.seed is not None else random.randrange(1 << 30)
    root = Path(tempfile.mkdtemp(prefix="skulk-chaos-"))
    print(f"chaos soak: {ns.seconds:.0f}s, {ns.nodes} nodes, {ns.clients} clients, seed {seed}; homes under {root}")
    verdict = Soak(SoakConfig(seconds=ns.seconds, root=root, nodes=ns.nodes, clients=ns.clients, seed=seed,
                              promise_s=ns.promise, replicas=ns.replicas)).run()
    if verdict.passed and not ns.keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"the nodes' homes and logs are kept under {root}")
    return 0 if verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main())
