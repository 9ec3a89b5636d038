"""Election and peer table (pure, explicit `now`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from skulk.cluster.state import IndexedEvent, NodeInfo, State, TaskDeleted
from skulk.services.gossip.peers import (
    PeerTable,
    announcement,
    first_gossip_of_node,
    parse_announcement,
    pick_address,
    quiet_period,
    view_complete,
)
from skulk.services.master.election import SETTLE_S, BecomeLeader, Broadcast, Election, Follow
from skulk.services.master.replication import SessionLog, seed
from skulk.wire.cluster import Campaign, LeaderAnnounce, PeerHello


def announce(node: str, seniority: int, clock: int = 1) -> LeaderAnnounce:
    return LeaderAnnounce(node_id=node, session=f"{clock}-{node}", clock=clock, seniority=seniority, head=0)


def test_a_lone_node_leads_its_own_session_at_once():
    e = Election("a")
    assert e.boot(0.0) == [BecomeLeader("1-a")] and e.is_leader


def test_meeting_leaders_converge_on_the_higher_key():
    a, b = Election("a"), Election("b")
    a.boot(0.0)
    b.boot(0.0)
    assert a.on_announce(b.announce(0), 0.5) == [Follow("b", "1-b")]
    assert b.on_announce(a.announce(0), 0.5) == []  # b outranks a (same seniority/clock, larger id)
    assert a.leader == b.leader == "b"


def test_a_lone_leader_that_executed_commands_is_not_deposed_by_a_fresh_one():
    used, fresh = Election("a"), Election("z")
    used.boot(0.0)
    fresh.boot(0.0)
    used.commands = 1  # e.g. a placement: its state must not be thrown away
    assert used.on_announce(fresh.announce(0), 0.5) == []
    assert fresh.on_announce(used.announce(0), 0.5) == [Follow("a", "1-a")]


def test_a_node_holding_state_does_not_adopt_a_fresh_lone_leaders_empty_session():
    """A node restarted alone in a partition leads a fresh session (no state, never used);
    after the heal, a node still holding the cluster's state (its leader lost) campaigns on
    instead of following it, and the fresh leader follows the winner. A node with no state
    follows it, and once used (a command) it is not fresh any more."""
    fresh = Election("a")
    fresh.boot(0.0)
    assert fresh.announce(3).fresh
    holder = Election("b", timeout_s=3.0)
    holder.on_membership(frozenset({"b", "c", "d"}), 0.0, 0)
    holder.on_announce(announce("d", 4), 0.0)  # it follows d and holds d's state
    assert holder.on_membership(frozenset({"b", "c"}), 1.0, 7)[0] == Broadcast(Campaign(node_id="b", clock=2,
                                                                                        last_idx=7))
    assert holder.on_announce(fresh.announce(3), 1.1, last_idx=7) == []
    assert holder.campaign_until is not None
    empty = Election("e")
    empty.on_membership(frozenset({"a", "e"}), 0.0, -1)
    assert empty.on_announce(fresh.announce(3), 0.1, last_idx=-1) == [Follow("a", "1-a")]
    restarted = Election("r")
    restarted.boot(0.0, has_state=True)  # a saved state: its session is not a fresh one
    assert not restarted.announce(0).fresh
    fresh.commands = 1
    assert not fresh.announce(3).fresh
    assert holder.on_announce(fresh.announce(3), 1.2, last_idx=7) == [Follow("a", "1-a")]


def test_an_established_leader_is_not_deposed_by_a_late_joiner():
    c = Election("c")
    c.boot(0.0)
    c.on_membership(frozenset({"c", "a", "b"}), 1.0, 5)
    assert c.seniority == 1  # members are not followers yet
    c.follower("a")
    c.follower("b")
    assert c.seniority == 3
    z = Election("z")  # larger id, but a lone newcomer
    z.boot(2.0)
    z.on_membership(frozenset({"z", "a", "b", "c"}), 2.0, 0)  # seeing the others is not leading them
    assert z.seniority == 1
    assert c.on_announce(z.announce(0), 2.1) == []
    assert z.on_announce(c.announce(5), 2.1) == [Follow("c", "1-c")]


def test_leader_loss_starts_a_campaign_that_elects_the_most_informed_after_the_timeout():
    e = Election("a", timeout_s=3.0)
    e.on_membership(frozenset({"a", "b", "c"}), 0.0, 0)
    e.on_announce(announce("c", 3), 0.0)
    actions = e.on_membership(frozenset({"a", "b"}), 1.0, last_idx=7)
    assert actions == [Broadcast(Campaign(node_id="a", clock=2, last_idx=7))]
    e.on_campaign(Campaign(node_id="b", clock=2, last_idx=9), 1.1, 7)
    assert e.tick(3.9, 7) == []  # window still open
    assert e.tick(4.0, 7) == [] and e.leader == "b" and not e.is_leader
    # b wins in its own round and announces; a follows its new session.
    assert e.on_announce(announce("b", 2, clock=2), 4.1) == [Follow("b", "2-b")]


def test_the_campaign_winner_is_self_when_it_knows_most():
    e = Election("b", timeout_s=3.0)
    e.on_membership(frozenset({"a", "b"}), 0.0, 0)
    e.start(0.0, last_idx=9)
    e.on_campaign(Campaign(node_id="a", clock=1, last_idx=3), 0.5, 9)
    assert e.tick(3.0, 9) == [BecomeLeader("1-b")] and e.is_leader and e.seniority == 2


def test_a_silent_expected_leader_triggers_a_new_campaign():
    e = Election("a", timeout_s=3.0)
    e.on_announce(announce("b", 2), 0.0)
    assert e.tick(2.9, 0) == []
    assert isinstance(e.tick(3.1, 0)[0], Broadcast) and e.leader is None


def test_campaigns_are_ignored_while_a_live_leader_exists():
    e = Election("a")
    e.on_announce(announce("b", 2), 0.0)
    assert e.on_campaign(Campaign(node_id="z", clock=9, last_idx=0), 1.0, 0) == []


def test_a_follower_that_thaws_campaigns_but_the_leader_keeps_its_session():
    a, b = Election("a"), Election("b")
    a.boot(0.0)
    a.on_membership(frozenset({"a", "b"}), 0.0, 0)
    b.on_membership(frozenset({"a", "b"}), 0.0, 0)
    assert b.on_announce(a.announce(3), 0.5) == [Follow("a", "1-a")]
    a.follower("b")
    campaign = b.tick(60.0, 3)  # b was frozen for a minute: its leader looks silent
    assert isinstance(campaign[0], Broadcast)
    assert a.on_campaign(campaign[0].msg, 60.0, 9) == [] and a.is_leader and a.session == "1-a"
    assert b.on_announce(a.announce(9), 60.2) == [Follow("a", "1-a")]


def test_a_leader_that_thaws_follows_the_one_elected_meanwhile():
    a, b = Election("a"), Election("b")
    a.boot(0.0)
    for e in (a, b):
        e.on_membership(frozenset({"a", "b"}), 0.0, 0)
    assert b.on_announce(a.announce(0), 0.5) == [Follow("a", "1-a")]
    a.follower("b")  # b asked a for the state: a's seniority grows to 2
    assert a.tick(1.0, 4) == [] and a.is_leader
    b.on_membership(frozenset({"b"}), 2.5, 4)  # a froze and left the membership: b campaigns
    assert b.tick(5.6, 4) == [BecomeLeader(f"{b.clock}-b")]
    b.on_membership(frozenset({"a", "b"}), 20.0, 6)  # a thaws, still leading its old session...
    campaign = a.tick(20.0, 4)  # ...but its own ticks stopped for 19 s: it knows it was frozen
    assert isinstance(campaign[0], Broadcast) and not a.is_leader
    assert b.on_campaign(campaign[0].msg, 20.0, 6) == [] and b.is_leader  # b keeps its session
    assert a.on_announce(b.announce(6), 20.2) == [Follow("b", f"{b.clock}-b")]


def test_a_thawed_leader_steps_down_even_if_its_gossip_first_shows_it_alone():
    a, b = Election("a"), Election("b")
    b.boot(0.0)
    for e in (a, b):
        e.on_membership(frozenset({"a", "b"}), 0.0, 0)
    a.on_announce(b.announce(0), 0.5)
    b.follower("a")
    b.tick(1.0, 3)
    # b thaws 10 s later; its gossip, frozen too, first declares a gone, then hears it again
    assert isinstance(b.on_membership(frozenset({"b"}), 11.0, 3)[0], Broadcast) and not b.is_leader
    assert b.on_membership(frozenset({"a", "b"}), 11.01, 3) == [Broadcast(b.candidates["b"])]  # a hears it too
    a.tick(1.0, 3)
    a.on_membership(frozenset({"a"}), 2.5, 3)
    assert a.tick(5.6, 3) == [BecomeLeader(f"{a.clock}-a")]
    assert b.on_announce(a.announce(5), 11.2, 3) == [Follow("a", f"{a.clock}-a")]


def test_a_thawed_leader_that_first_hears_the_new_leader_follows_it():
    b = Election("b")
    b.boot(0.0)
    b.on_membership(frozenset({"a", "b"}), 0.0, 0)
    b.follower("a")
    b.tick(1.0, 3)
    new = LeaderAnnounce(node_id="a", session="2-a", clock=2, seniority=1, head=5)  # lower key
    actions = b.on_announce(new, 11.0, 3)
    assert isinstance(actions[0], Broadcast) and actions[-1] == Follow("a", "2-a")


def test_a_lone_leader_that_was_frozen_keeps_leading():
    a = Election("a")
    a.boot(0.0)
    a.on_membership(frozenset({"a"}), 0.0, 0)
    a.tick(1.0, 0)
    assert a.tick(60.0, 0) == [] and a.is_leader and a.session == "1-a"


def hello(node: str, port: int) -> PeerHello:
    info = NodeInfo(node_id=node, friendly_name=node, skulk_version="t", ram_total=1, ram_available=1,
                    when=0.0, addresses=("10.0.0.5", "127.0.0.1"))
    return PeerHello(namespace="ns", info=info, gossip_port=port, master_port=port + 1)


def test_peer_table_joins_and_expires_by_liveness():
    t = PeerTable("me", timeout_s=3.0)
    assert t.heard(hello("p", 7000), "10.0.0.5", 0.0) is True
    assert t.heard(hello("p", 7000), "10.0.0.5", 2.0) is False
    assert t.heard(hello("me", 1), "x", 0.0) is False
    assert t.expire(4.9) == [] and t.endpoints() == {"10.0.0.5:7000"}
    assert t.expire(5.1) == ["p"] and t.peers == {}


def test_peers_are_dialled_by_advertised_address_never_by_name():
    assert pick_address(("10.0.0.5", "192.168.1.2"), "192.168.1.2") == "192.168.1.2"
    assert pick_address(("10.0.0.5",), "studio.local") == "10.0.0.5"


def test_session_log_replays_or_asks_for_a_snapshot_and_seed_keeps_instances():
    log = SessionLog("s")
    for i in range(5):
        log.append(IndexedEvent(idx=i, session="s", event=TaskDeleted(task_id=str(i))))
    assert [e.idx for e in log.since(2)] == [3, 4]
    assert log.since(4) == []
    log.events.popleft()
    assert log.since(-1) is None
    old = State(session="old", master_node_id="x", last_event_applied_idx=41)
    new = seed(old, "2-a", "a")
    assert (new.session, new.master_node_id, new.last_event_applied_idx, new.tasks) == ("2-a", "a", -1, {})


def test_what_a_master_published_is_kept_per_session_for_its_event_log():
    kept = SessionLog("")
    for i in range(5):
        kept.note(IndexedEvent(idx=i, session="s1", event=TaskDeleted(task_id=str(i))))
    assert [e.idx for e in kept.after("s1", 1)] == [2, 3, 4] and kept.after("other", -1) == ()
    assert [e.idx for e in kept.after("s1", -1, limit=2)] == [0, 1]  # one frame at a time
    kept.note(IndexedEvent(idx=0, session="s2", event=TaskDeleted(task_id="x")))  # a new leader
    assert kept.after("s1", -1) == () and [e.idx for e in kept.after("s2", -1)] == [0]


def test_lan_announcements_round_trip_and_refuse_strangers():
    data = announcement("h1", "node-a", 52416)
    assert parse_announcement(data, "h1", "node-b") == 52416
    assert parse_announcement(data, "other-namespace", "node-b") is None
    assert parse_announcement(data, "h1", "node-a") is None  # our own broadcast
    for junk in (b"", b"\xff\xfe", b"skulk1 h1 x notaport", b"skulk1 h1 x 70000", b"http/1.1 200"):
        assert parse_announcement(junk, "h1", "node-b") is None


def test_a_booting_master_leads_alone_only_when_its_node_is_alone():
    alone = Election("a")
    assert alone.boot(0.0, wait_s=1.0) == [] and not alone.is_leader
    assert alone.on_membership(frozenset({"a"}), 0.3, -1) == [BecomeLeader("1-a")]
    silent = Election("a")
    silent.boot(0.0, wait_s=1.0)
    assert silent.tick(0.9, -1) == [] and silent.tick(1.0, -1) == [BecomeLeader("1-a")]
    # A master restarted inside a running cluster: its node has peers, so it campaigns (no
    # empty session of its own for its node's API and worker to follow).
    restarted = Election("a")
    restarted.boot(0.0, wait_s=1.0)
    actions = restarted.on_membership(frozenset({"a", "b", "c"}), 0.3, -1)
    assert actions == [Broadcast(Campaign(node_id="a", clock=2, last_idx=-1))] and not restarted.is_leader
    joining = Election("z")
    joining.boot(0.0, wait_s=1.0)
    assert joining.on_announce(announce("c", 3), 0.2) == [Follow("c", "1-c")]
    assert joining.tick(1.5, -1) == [] and joining.leader == "c"  # the boot wait is over: it follows


def test_the_leaders_master_restarted_in_place_does_not_wipe_the_cluster_state():
    """Found by the chaos soak: the leader's master process was SIGKILLed and restarted by its
    supervisor; it opened an empty one-node session, the followers (campaigning once the old
    leader went quiet) followed it, and every instance of the cluster was gone."""
    b = Election("b", timeout_s=3.0)
    b.on_membership(frozenset({"a", "b", "c"}), 0.0, 483)
    assert b.on_announce(LeaderAnnounce(node_id="a", session="1-a-old", clock=1, seniority=3, head=483),
                         0.0, 483) == [Follow("a", "1-a-old")]
    again = Election("a", timeout_s=3.0, incarnation="new")
    again.boot(1.0, wait_s=1.0)
    campaign = again.on_membership(frozenset({"a", "b", "c"}), 1.2, -1)[0]
    assert isinstance(campaign, Broadcast)
    joined = b.on_campaign(campaign.msg, 1.2, 483)  # the campaigner is the node b followed
    assert joined == [Broadcast(Campaign(node_id="b", clock=2, last_idx=483))]
    again.on_campaign(joined[0].msg, 1.3, -1)
    assert b.tick(4.2, 483) == [BecomeLeader("2-b")]  # the most informed wins
    assert again.tick(4.3, -1) == [] and again.leader == "b"


def test_a_campaign_every_member_joined_is_decided_after_the_settle_time_not_the_timeout():
    e = Election("a", timeout_s=3.0)
    e.on_membership(frozenset({"a", "b", "c"}), 0.0, 0)
    e.start(0.0, last_idx=4)
    e.on_campaign(Campaign(node_id="b", clock=1, last_idx=4), 0.1, 4)
    e.on_campaign(Campaign(node_id="c", clock=1, last_idx=2), 0.2, 4)
    assert e.tick(SETTLE_S - 0.05, 4) == [] and e.campaign_until is not None  # everyone in, within SETTLE_S
    assert e.tick(SETTLE_S, 4) == [] and e.leader == "b"  # decided: b (same index, larger id than a)

    late = Election("a", timeout_s=3.0)
    late.on_membership(frozenset({"a", "b", "c"}), 0.0, 0)
    late.start(0.0, last_idx=4)
    late.on_campaign(Campaign(node_id="b", clock=1, last_idx=4), 0.1, 4)
    assert late.tick(SETTLE_S + 0.1, 4) == [] and late.campaign_until is not None  # c has not campaigned
    late.on_campaign(Campaign(node_id="c", clock=1, last_idx=9), 1.0, 4)
    assert late.tick(1.0, 4) == [] and late.leader == "c"  # decided as soon as the last one is in


def test_a_member_that_never_campaigns_keeps_the_whole_timeout():
    e = Election("c", timeout_s=3.0)
    e.on_membership(frozenset({"a", "b", "c"}), 0.0, 0)
    e.start(0.0, last_idx=0)
    e.on_campaign(Campaign(node_id="a", clock=1, last_idx=0), 0.1, 0)
    assert e.tick(2.9, 0) == [] and e.campaign_until is not None  # b's master may be restarting
    assert e.tick(3.0, 0) == [BecomeLeader("1-c")]


def test_a_campaign_before_the_first_membership_waits_for_the_timeout():
    e = Election("a", timeout_s=3.0)
    e.boot(0.0, wait_s=10.0)
    e.on_campaign(Campaign(node_id="b", clock=2, last_idx=0), 0.5, 0)  # heard before gossip spoke
    assert e.tick(SETTLE_S + 0.1, 0) == [] and e.campaign_until is not None


@given(st.integers(2, 5), st.randoms(use_true_random=False))
def test_nodes_that_all_campaign_agree_on_one_leader_early(n, rnd):
    """Every node sees the same members and campaigns (a cluster forming); campaigns arrive in
    any order within 0.5 s: all pick the same winner, exactly one leads, before the timeout."""
    ids = [f"n{i}" for i in range(n)]
    nodes = {i: Election(i, timeout_s=3.0) for i in ids}
    inbox: list[tuple[float, str, Campaign]] = []
    for i, e in nodes.items():
        e.on_membership(frozenset(ids), 0.0, 0)
        for action in e.start(rnd.uniform(0.0, 0.3), last_idx=rnd.randint(0, 3)):
            inbox += [(e.campaign_began + rnd.uniform(0.0, 0.2), j, action.msg) for j in ids if j != i]
    leaders, t = [], 0.0
    while t < 2.9:
        t = round(t + 0.1, 1)
        for due in sorted((m for m in inbox if m[0] <= t), key=lambda m: (m[0], m[1])):
            inbox.remove(due)
            for action in nodes[due[1]].on_campaign(due[2], t, 0):
                inbox += [(t + rnd.uniform(0.0, 0.2), j, action.msg) for j in ids if j != due[1]]
        for e in nodes.values():
            leaders += [e.node_id for a in e.tick(t, 0) if isinstance(a, BecomeLeader)]
    assert len(leaders) == 1 and all(e.leader == leaders[0] for e in nodes.values())


def test_a_restarted_gossip_keeps_quiet_until_it_heard_everyone_it_knows_of():
    own = {"10.0.0.1:52416"}
    assert not view_complete(set(), set(), own)  # heard nobody: a lonely view, keep quiet
    assert not view_complete({"10.0.0.2:52416", "10.0.0.3:52416"}, {"10.0.0.2:52416"}, own)
    assert view_complete({"10.0.0.2:52416", "10.0.0.3:52416", "10.0.0.1:52416"},
                         {"10.0.0.2:52416", "10.0.0.3:52416"}, own)  # itself, named by a peer, excepted


def test_only_a_nodes_first_gossip_that_cannot_find_peers_skips_the_quiet_period(tmp_path):
    assert quiet_period(True, False, False, 1.5) == 0.0  # a lone loopback node: at once
    assert quiet_period(False, False, False, 1.5) == 1.5  # a gossip role restarted in a running node
    assert quiet_period(True, True, False, 1.5) == 1.5  # bootstrap peers: listen for them first
    assert quiet_period(True, False, True, 1.5) == 1.5  # LAN discovery: peers may answer the broadcast
    assert first_gossip_of_node(tmp_path, 100.5)
    assert not first_gossip_of_node(tmp_path, 100.5)  # restarted: the node's start is the same
    assert first_gossip_of_node(tmp_path, 200.0)  # a new start of the node (not in place)
    assert not first_gossip_of_node(tmp_path / "missing", 300.0)  # cannot mark: not first
