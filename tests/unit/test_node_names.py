"""Unique node names: who yields when two live nodes share one (services/gossip/names.py)."""

from __future__ import annotations

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
