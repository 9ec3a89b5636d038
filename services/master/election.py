"""Leader election (pure, `now` passed in).

- Boot: a lone node leads its own one-node session as soon as its gossip shows it alone
  (upstream's instant initial campaign), so it serves at once. With peers (a master restarted
  inside a running cluster, a node joining one) it campaigns instead: it never opens an empty
  session that its own node's API and worker would follow (they would drop every instance and
  its runners). The first membership is awaited for at most `BOOT_WAIT_S` (the core skips the
  wait for a node restarted with a saved state that names no other node: it was alone).
- Meeting: leaders announce `(seniority, clock, commands, node id)` every 0.5 s; a leader that
  hears a higher key steps down and follows (commands: state-changing commands it executed, so
  a lone node that was placed on is not deposed by a fresh one, whose state would win). A
  leader's seniority is the largest cluster it has led, counted by nodes that actually follow
  it (they ask it for the state), never by the gossip member count, so a late joiner or a
  healed lone node never deposes an established leader. A node without a live leader does not
  follow a fresh leader (`knows_more`: one that booted alone with no state and was never used,
  say a node restarted alone in a partition) while it holds state from another session: it
  campaigns on, and the fresh leader follows the winner, who outranks it.
- Freeze: a leader that was not called for longer than the announce liveness (the process was
  stopped, the machine slept) knows its followers have given up on it: it campaigns, and
  follows whoever they elected meanwhile.
- Loss: when the leader leaves the gossip membership (or stops announcing), every node
  campaigns: raises its clock above any seen, tells every member, and after `timeout_s`
  (DEFAULT_ELECTION_TIMEOUT, 3 s) picks the max candidate by (clock, last applied index,
  node id): the node that knows the most state wins. Once every member gossip lists has
  campaigned at this clock, nobody is left to hear from: the pick is made `SETTLE_S` after the
  campaign began instead (a cluster forming or a master lost with every other node alive: 0.5 s,
  not 3); the wait lets members still being discovered show up first. Each win opens a new
  session. A leader ignores campaigns (a follower that froze past the liveness window
  campaigns on thaw, then hears the leader's announce and follows it): no new session,
  nothing in flight fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from skulk.wire.cluster import Campaign, LeaderAnnounce

DEFAULT_ELECTION_TIMEOUT = 3.0
SETTLE_S = 0.5
"""A campaign every member has joined is decided this long after it began (at most the timeout):
gossip hellos every 0.25 s, so a member the others are still discovering is in the membership
by then, and its campaign is awaited as well."""
ANNOUNCE_LIVENESS_S = 3.0
BOOT_WAIT_S = 10.0
"""How long a booting master waits for its node's first membership before leading alone. Gossip
publishes it once it has listened for a peer timeout (1.5 s), then every 0.25 s, so this only
caps the wait for a gossip role that is itself (re)starting, perhaps slowly on a loaded machine."""


@dataclass(frozen=True, slots=True)
class Broadcast:
    msg: Campaign


@dataclass(frozen=True, slots=True)
class BecomeLeader:
    session: str


@dataclass(frozen=True, slots=True)
class Follow:
    leader: str
    session: str


Action = Broadcast | BecomeLeader | Follow


@dataclass
class Election:
    node_id: str
    timeout_s: float = DEFAULT_ELECTION_TIMEOUT
    incarnation: str = ""
    """Part of every session id this process opens: a node restarted in place keeps its node
    id and starts its clock again, and its new session must not pass for the old one (whose
    followers would take the new events for ones they already have)."""
    wins: int = 0
    """Sessions this process has opened, also part of each id: a campaign may bring the clock back
    to one this node already led at (`on_campaign` joins at the campaigner's clock), and a second
    session under the same id would pass for the first with its index started over."""
    clock: int = 0
    seniority: int = 0
    leader: str | None = None
    session: str = ""
    leader_key: tuple[int, int, int, str] = (0, 0, 0, "")
    commands: int = 0  # state-changing commands executed as leader
    leader_seen: float = 0.0
    campaign_until: float | None = None
    campaign_began: float = 0.0
    candidates: dict[str, Campaign] = field(default_factory=dict)
    members: frozenset[str] = frozenset()
    followers: set[str] = field(default_factory=set)
    state_session: str = ""  # the session this node's state comes from (the last it led or followed)
    boots_empty: bool = False  # `boot(has_state=False)`: the process began with no saved state
    fresh: bool = False  # the session it leads was opened at boot, alone, with no state
    last_call: float | None = None  # `now` of the last tick, membership or announce: a gap is a freeze
    booting_until: float | None = None  # `boot(wait_s=...)`: until the first membership says who is there

    @property
    def is_leader(self) -> bool:
        return self.leader == self.node_id

    def key(self) -> tuple[int, int, int, str]:
        return (self.seniority, self.clock, self.commands, self.node_id)

    def boot(self, now: float, wait_s: float = 0.0, has_state: bool = False) -> list[Action]:
        """Lead alone at once, or (`wait_s`) once the first membership shows this node alone or
        `wait_s` passes in silence; a membership with peers makes it campaign instead.
        `has_state`: the process began with a saved state (its session is not a fresh one)."""
        self.clock, self.boots_empty = 1, not has_state
        if wait_s > 0:
            self.booting_until = now + wait_s
            return []
        return self._win(now, 1, fresh=self.boots_empty)

    def _booted(self, now: float, last_idx: int) -> list[Action]:
        self.booting_until = None
        if self.members - {self.node_id}:
            return self.start(now, last_idx)
        return self._win(now, 1, fresh=self.boots_empty)

    def _win(self, now: float, size: int, fresh: bool = False) -> list[Action]:
        self.booting_until = None
        self.seniority = max(self.seniority, size)
        self.followers = set()
        self.leader = self.node_id
        self.wins += 1
        self.session = f"{self.clock}-{self.node_id}" + (f"-{self.incarnation}" if self.incarnation else "") \
            + (f".{self.wins}" if self.wins > 1 else "")
        self.state_session, self.fresh = self.session, fresh
        self.leader_key, self.leader_seen = self.key(), now
        self.campaign_until, self.candidates = None, {}
        return [BecomeLeader(self.session)]

    def announce(self, head: int) -> LeaderAnnounce:
        return LeaderAnnounce(node_id=self.node_id, session=self.session, clock=self.clock,
                              seniority=self.seniority, head=head, commands=self.commands,
                              fresh=self.fresh and self.commands == 0)

    def start(self, now: float, last_idx: int) -> list[Action]:
        self.booting_until = None
        self.clock += 1
        self.leader, self.session = None, ""
        self.campaign_until, self.campaign_began = now + self.timeout_s, now
        me = Campaign(node_id=self.node_id, clock=self.clock, last_idx=last_idx)
        self.candidates = {self.node_id: me}
        return [Broadcast(me)]

    def all_heard(self, now: float) -> bool:
        """The campaign can be decided before its timeout: every member (there are others) has
        campaigned at this clock, and it began at least `SETTLE_S` ago."""
        return (len(self.members) > 1 and self.node_id in self.members and self.members <= self.candidates.keys()
                and now >= self.campaign_began + min(SETTLE_S, self.timeout_s))

    def on_membership(self, members: frozenset[str], now: float, last_idx: int) -> list[Action]:
        thawed = self._thawed(now, last_idx)
        joined = members - self.members
        self.members = members
        if self.booting_until is not None:
            return self._booted(now, last_idx)
        if thawed or self.is_leader:
            return thawed
        if self.leader is not None and self.leader not in members:
            return self.start(now, last_idx)
        if self.campaign_until is not None and joined:
            return [Broadcast(self.candidates[self.node_id])]
        return []

    def follower(self, node_id: str) -> None:
        """A node asked this leader for its state: it follows us; seniority grows with them."""
        if self.is_leader and node_id != self.node_id and node_id in self.members:
            self.followers.add(node_id)
            self.seniority = max(self.seniority, 1 + len(self.followers))

    def on_campaign(self, msg: Campaign, now: float, last_idx: int) -> list[Action]:
        if self.is_leader:
            return []  # we lead and announce: the campaigner (say a follower that froze) follows
        if self.leader is not None and now - self.leader_seen < ANNOUNCE_LIVENESS_S \
                and msg.node_id != self.leader:
            return []  # a live leader exists: the campaigner will hear its announce
        if self.campaign_until is None or msg.clock > self.clock:
            self.clock = max(self.clock, msg.clock) - 1
            actions = self.start(now, last_idx)
            self.candidates[msg.node_id] = msg
            return actions
        if msg.clock == self.clock:
            self.candidates[msg.node_id] = msg
        return []

    def on_announce(self, msg: LeaderAnnounce, now: float, last_idx: int = -1) -> list[Action]:
        thawed = self._thawed(now, last_idx)
        return thawed + self._announced(msg, now, last_idx)

    def _announced(self, msg: LeaderAnnounce, now: float, last_idx: int) -> list[Action]:
        theirs = (msg.seniority, msg.clock, msg.commands, msg.node_id)
        if msg.node_id == self.node_id:
            return []
        if self.is_leader and theirs < self.key():
            return []  # we outrank it; it follows us when it hears our announce
        if self.leader == msg.node_id and self.session == msg.session:
            self.leader_seen, self.leader_key = now, theirs
            return []
        if not self.is_leader and self.leader is not None and self.session \
                and now - self.leader_seen < ANNOUNCE_LIVENESS_S and theirs < self.leader_key:
            return []  # we follow a live leader that outranks this one
        if not self.is_leader and self.knows_more(msg, last_idx):
            return []  # it campaigns on; the poorer leader follows the winner, who outranks it
        self.booting_until = None
        self.clock = max(self.clock, msg.clock)
        self.state_session = msg.session
        self.leader, self.session, self.leader_seen, self.leader_key = msg.node_id, msg.session, now, theirs
        self.campaign_until, self.candidates = None, {}
        return [Follow(msg.node_id, msg.session)]

    def knows_more(self, msg: LeaderAnnounce, last_idx: int) -> bool:
        """Whether the announcer leads a fresh session (a node that booted alone with no state
        and was never used) while this node holds state from another session: say a node
        restarted alone in a partition while this one still held the cluster's state; following
        it would drop that state. (A node with no state, or following that session, follows.)"""
        return msg.fresh and last_idx >= 0 and bool(self.state_session) and self.state_session != msg.session

    def _thawed(self, now: float, last_idx: int) -> list[Action]:
        """Checked first by tick, membership and announce: a leader that was frozen longer than
        the announce liveness (its followers gave up on it) campaigns instead of imposing its old
        session, even if gossip, frozen too, briefly shows it alone (`followers` remembers who
        followed). Campaigns need no check: a leader ignores them either way."""
        frozen = self.last_call is not None and now - self.last_call > ANNOUNCE_LIVENESS_S
        self.last_call = now
        if frozen and self.is_leader and (len(self.members) > 1 or self.followers):
            return self.start(now, last_idx)
        return []

    def tick(self, now: float, last_idx: int) -> list[Action]:
        if self.booting_until is not None:
            return self._booted(now, last_idx) if now >= self.booting_until else []
        if thawed := self._thawed(now, last_idx):
            return thawed
        if self.campaign_until is not None and (now >= self.campaign_until or self.all_heard(now)):
            self.campaign_until = None
            live = [c for n, c in self.candidates.items() if n == self.node_id or n in self.members]
            winner = max(live, key=lambda c: (c.clock, c.last_idx, c.node_id))
            if winner.node_id == self.node_id:
                return self._win(now, len(self.members))
            self.leader, self.session, self.leader_seen = winner.node_id, "", now
            return []  # the winner announces once its own window closes
        if not self.is_leader and self.leader is not None and now - self.leader_seen > ANNOUNCE_LIVENESS_S:
            return self.start(now, last_idx)  # the expected leader never announced, or went quiet
        if self.leader is None and self.campaign_until is None:
            return self.start(now, last_idx)
        return []
