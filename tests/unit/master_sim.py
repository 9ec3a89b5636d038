"""A cluster of master cores in one process, no sockets and no clock: each core's effects are
delivered to the others as the service and the network would (a `ToPeer` reaches the
destination's cluster port, an `Answer` on the cluster channel comes back on the sender's link),
across the partitions the test sets, with time advanced in 0.1 s steps. Gossip's membership is
each live node's partition. `place` asks one node's core to place a model (the demo card)."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from skulk.cluster.catalog import NodeCatalogUpdated
from skulk.cluster.state import IndexedEvent, RunnerStatus, State
from skulk.services.master.core import CoreSettings, MasterCore
from skulk.services.master.effects import (
    Answer,
    Channel,
    Effect,
    Instant,
    LinkPeers,
    Publish,
    TellSupervisor,
    ToPeer,
    ToPeers,
)
from skulk.wire.cluster import Member, Membership
from skulk.wire.commands import PlaceInstance
from skulk.wire.control import AdminVerb
from skulk.wire.events import RunnerReport
from skulk.wire.message import Command, Message
from tests.unit.builders import CARD, node

WALL0 = 1_000_000.0


def member(node_id: str) -> Member:
    return Member(info=node(node_id), master_endpoint=f"tcp://{node_id}:1")


@dataclass
class Sim:
    names: list[str]
    settings: dict[str, CoreSettings] = field(default_factory=dict)
    t: float = 0.0
    cores: dict[str, MasterCore] = field(default_factory=dict)
    alive: set[str] = field(default_factory=set)
    groups: list[set[str]] = field(default_factory=list)
    links: dict[str, set[str]] = field(default_factory=dict)
    answers: dict[str, list[tuple[list[bytes] | None, Message]]] = field(default_factory=dict)
    told: dict[str, list[AdminVerb]] = field(default_factory=dict)
    published: dict[str, list[Message]] = field(default_factory=dict)
    steps: int = 0
    starts: int = 0
    catalogs: dict[str, NodeCatalogUpdated] = field(default_factory=dict)
    drop: Callable[[str, str, Message], bool] = lambda src, dst, msg: False
    """A filter for messages the network loses (source, destination, message)."""
    indexed: dict[tuple[str, int], Message] = field(default_factory=dict)
    """Every event any node published, by (session, index): one event per place, ever."""
    opened: set[str] = field(default_factory=set)
    leading: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.groups = [set(self.names)]
        for name in self.names:
            self.start(name)

    # -- the cluster -------------------------------------------------------------------------
    def start(self, name: str, saved: State | None = None) -> MasterCore:
        counter = itertools.count()
        self.starts += 1
        settings = self.settings.get(name, CoreSettings(node_id=name))
        settings = replace(settings, incarnation=f"i{self.starts}")
        core = MasterCore(settings, lambda: f"{name}-{next(counter):06d}", saved=saved,
                          own_catalog=self.catalogs.get(name))
        self.cores[name], self.alive = core, self.alive | {name}
        self.links[name] = set()
        self.answers.setdefault(name, [])
        self.told.setdefault(name, [])
        self.published.setdefault(name, [])
        if not any(name in g for g in self.groups):
            self.groups.append({name})
        self.deliver(name, core.boot(self.now()))
        return core

    def kill(self, name: str) -> None:
        """The node stops: no input reaches its core (`thaw` resumes the same core, as a process
        that was stopped rather than killed; `start` makes a new one)."""
        self.alive.discard(name)

    def thaw(self, name: str) -> None:
        self.alive.add(name)

    def partition(self, *groups: set[str]) -> None:
        self.groups = [set(g) for g in groups]

    def heal(self) -> None:
        self.groups = [set(self.names) | set(self.cores)]

    def now(self) -> Instant:
        return Instant(self.t, WALL0 + self.t)

    def reachable(self, a: str, b: str) -> bool:
        return a in self.alive and b in self.alive and any(a in g and b in g for g in self.groups)

    def view(self, name: str) -> set[str]:
        """What `name`'s gossip shows: the live nodes of its partition."""
        return {n for g in self.groups if name in g for n in g if n in self.alive}

    # -- time --------------------------------------------------------------------------------
    def step(self) -> None:
        self.t = round(self.t + 0.1, 6)
        self.steps += 1
        for name in sorted(self.alive):
            members = tuple(member(n) for n in sorted(self.view(name)))
            self.deliver(name, self.cores[name].on_bus(Membership(node_id=name, members=members), self.now()))
        for name in sorted(self.alive):
            self.deliver(name, self.cores[name].tick(self.now()))
        if self.steps % 10 == 0:
            for name in sorted(self.alive):
                self.deliver(name, self.cores[name].every_second(self.now()))
        for name in sorted(self.alive):  # no session is opened twice, by anyone
            election = self.cores[name].election
            if election.is_leader and self.leading.get(name) != election.session:
                assert election.session not in self.opened, f"{name} opened session {election.session} again"
                self.opened.add(election.session)
            self.leading[name] = election.session if election.is_leader else ""

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds / 0.1)):
            self.step()

    # -- inputs from outside -----------------------------------------------------------------
    def command(self, name: str, cmd: Command) -> None:
        """What the node's API sends its master."""
        self.deliver(name, self.cores[name].on_local([b"api", cmd.command_id.encode()], cmd, self.now()))

    def bus(self, name: str, msg: Message) -> None:
        self.deliver(name, self.cores[name].on_bus(msg, self.now()))

    def reply(self, name: str, command_id: str) -> Message | None:
        got = [m for env, m in self.answers[name] if env == [b"api", command_id.encode()]]
        assert len(got) <= 1, f"answered {len(got)} times: {got}"
        return got[0] if got else None

    # -- the network -------------------------------------------------------------------------
    def deliver(self, source: str, effects: list[Effect]) -> None:
        queue: deque[tuple[str, Effect]] = deque((source, e) for e in effects)
        while queue:
            src, effect = queue.popleft()
            for dst, msg in self.sends(src, effect):
                if self.reachable(src, dst) and dst in self.links[src] and not self.drop(src, dst, msg):
                    more = self.cores[dst].on_cluster([src.encode()], msg, self.now())
                    queue.extend((dst, e) for e in more)
            if isinstance(effect, Answer) and effect.channel is Channel.CLUSTER:
                dst = effect.envelope[0].decode() if effect.envelope else ""
                if self.reachable(src, dst) and not self.drop(src, dst, effect.message):
                    queue.extend((dst, e) for e in self.cores[dst].on_peer(effect.message, self.now()))
            elif isinstance(effect, Answer):
                self.answers[src].append((effect.envelope, effect.message))
            elif isinstance(effect, LinkPeers):
                self.links[src] = set(effect.members) - {src}
            elif isinstance(effect, TellSupervisor):
                self.told[src].append(effect.verb)
            elif isinstance(effect, Publish):
                self.published[src].append(effect.message)
                if isinstance(effect.message, IndexedEvent):
                    place = (effect.message.session, effect.message.idx)
                    first = self.indexed.setdefault(place, effect.message)
                    assert first == effect.message, f"two events at {place}: {first} and {effect.message}"

    def sends(self, src: str, effect: Effect) -> list[tuple[str, Message]]:
        if isinstance(effect, ToPeers):
            return [(dst, effect.message) for dst in sorted(self.links[src])]
        if isinstance(effect, ToPeer):
            return [(effect.node_id, effect.message)]
        return []

    # -- what tests look at ------------------------------------------------------------------
    def leaders(self) -> list[str]:
        return sorted(n for n in self.alive if self.cores[n].election.is_leader)

    def settled(self, names: set[str] | None = None) -> str | None:
        """The one leader every live node of `names` follows in one session with its state, or None."""
        names = names if names is not None else set(self.alive)
        leaders = [n for n in names if self.cores[n].election.is_leader]
        if len(leaders) != 1:
            return None
        lead = self.cores[leaders[0]]
        same = all(self.cores[n].election.leader == leaders[0] and self.cores[n].state == lead.state
                   for n in names)
        return leaders[0] if same else None

    def until_settled(self, names: set[str] | None = None, within_s: float = 20.0) -> str:
        for _ in range(round(within_s / 0.1)):
            if (leader := self.settled(names)) is not None:
                return leader
            self.step()
        raise AssertionError(f"no single leader after {within_s}s: "
                             f"{[(n, c.election.leader, c.state.session) for n, c in self.cores.items()]}")


def place(sim: Sim, name: str, command_id: str, card=CARD) -> None:
    sim.command(name, PlaceInstance(command_id=command_id, card=card))


def serving(sim: Sim) -> tuple[str, str]:
    """Make the placed instance's runner report ready on its node; (node, runner)."""
    leader = sim.cores[sim.leaders()[0]]
    inst = next(iter(leader.state.instances.values()))
    (node_id, runner_id), = inst.node_to_runner.items()
    sim.bus(node_id, RunnerReport(runner_id=runner_id, instance_id=inst.instance_id,
                                  status=RunnerStatus(kind="RunnerReady", endpoint=f"tcp://{node_id}:9")))
    sim.run(0.2)
    return node_id, runner_id
