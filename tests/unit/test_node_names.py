"""Unique node names: who yields when two live nodes share one (services/gossip/names.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from skulk.services.gossip.names import Clash, Decision, Named, judge, later

ME = Named("m", "twin", 100.0)


def test_no_clash_for_other_names_or_for_myself():
    assert judge(ME, [], Named("a", "other", 50.0)) == Decision(Clash.NONE)
    assert judge(ME, [], Named("m", "twin", 100.0)) == Decision(Clash.NONE)
    assert judge(ME, [Named("b", "bee", 1.0)], Named("b", "bee", 1.0)) == Decision(Clash.NONE)  # its own hello


def test_the_node_started_later_refuses_and_the_earlier_ignores_it():
    earlier = Named("e", "TWIN", 90.0)  # names compare without case
    assert judge(ME, [], earlier) == Decision(Clash.REFUSE_SELF, earlier)
    newer = Named("n", "twin", 110.0)
    assert judge(ME, [], newer) == Decision(Clash.IGNORE_SENDER, ME)
    # the two sides agree: exactly one of them refuses
    assert judge(earlier, [], ME) == Decision(Clash.IGNORE_SENDER, earlier)


def test_equal_start_times_fall_back_to_the_node_id():
    a, b = Named("a", "twin", 5.0), Named("b", "twin", 5.0)
    assert later(b, a) and not later(a, b)
    assert judge(b, [], a).clash is Clash.REFUSE_SELF and judge(a, [], b).clash is Clash.IGNORE_SENDER


def test_a_third_node_keeps_the_earlier_holder_of_a_name():
    holder = Named("h", "twin-peer", 10.0)
    newcomer = Named("x", "twin-peer", 20.0)
    assert judge(ME, [holder], newcomer) == Decision(Clash.IGNORE_SENDER, holder)
    # admitted the later one first: the earlier one replaces it
    assert judge(ME, [newcomer], holder) == Decision(Clash.DROP_MEMBER, newcomer)


def test_a_restarted_node_with_a_new_id_waits_for_its_old_id_to_expire():
    """Its peers still count the old id (same name, started earlier) for up to the peer
    timeout: the new id is ignored until then, and it never hears the old id, so never
    refuses (the old process is gone)."""
    old, new = Named("old", "n2", 10.0), Named("new", "n2", 50.0)
    assert judge(ME, [old], new).clash is Clash.IGNORE_SENDER
    assert judge(ME, [], new).clash is Clash.NONE  # after the old id expired
    assert judge(new, [], ME).clash is Clash.NONE  # what the new one hears from the peers


def test_a_node_given_no_name_takes_its_derived_name_instead_of_refusing():
    earlier = Named("e", "vm", 90.0)
    unnamed = Named("m", "vm", 100.0)
    assert judge(unnamed, [], earlier, derived="vm-1a2b") == Decision(Clash.TAKE_DERIVED, earlier)
    taken = Named("m", "vm-1a2b", 100.0)
    assert judge(taken, [], earlier, derived="vm-1a2b") == Decision(Clash.NONE)
    # the earlier node still ignores the later one until it has renamed itself
    assert judge(earlier, [], unnamed, derived="vm-9f9f") == Decision(Clash.IGNORE_SENDER, earlier)
    # under its derived name it refuses as a named node does (nothing further to take)
    assert judge(taken, [], Named("x", "VM-1A2B", 50.0), derived="vm-1a2b").clash is Clash.REFUSE_SELF


@given(st.lists(st.sampled_from([0.0, 1.0, 2.5, 7.0]), min_size=2, max_size=6),  # ties too
       st.randoms(use_true_random=False))
def test_nodes_sharing_a_host_name_settle_on_distinct_names_and_all_join(starts, rnd):
    """Any number of nodes given no name on one host, any start order, hellos heard in any
    order: every node ends up a member of every other, under distinct names, none refused."""
    nodes = {f"id{i}": Named(f"id{i}", "host", t) for i, t in enumerate(starts)}
    derived = {i: f"host-{n:04x}" for n, i in enumerate(nodes)}
    members: dict[str, dict[str, Named]] = {i: {} for i in nodes}
    for _round in range(len(nodes) + 2):
        pairs = [(a, b) for a in nodes for b in nodes if a != b]
        rnd.shuffle(pairs)
        for me_id, sender_id in pairs:
            while True:
                sender, me = nodes[sender_id], nodes[me_id]
                decision = judge(me, members[me_id].values(), sender, derived[me_id])
                assert decision.clash is not Clash.REFUSE_SELF
                if decision.clash is Clash.TAKE_DERIVED:
                    nodes[me_id] = Named(me_id, derived[me_id], me.started)
                    continue
                if decision.clash is Clash.DROP_MEMBER and decision.other is not None:
                    members[me_id].pop(decision.other.node_id)
                if decision.clash is not Clash.IGNORE_SENDER:
                    members[me_id][sender_id] = sender
                break
    names = [n.name for n in nodes.values()]
    assert len(set(names)) == len(names)
    for me_id in nodes:
        assert members[me_id] == {i: n for i, n in nodes.items() if i != me_id}
