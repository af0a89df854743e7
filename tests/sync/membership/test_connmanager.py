"""The connection manager's decisions on a fixed clock, and its watermarks under any churn."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.membership import ConnectionManager, ConnLimits


def test_idle_connections_close_and_speakers_stay() -> None:
    cm = ConnectionManager(ConnLimits(idle_timeout_s=20))
    cm.opened("idle", "1.1.1.1", True, 0)
    cm.opened("talker", "1.1.1.2", True, 0)
    cm.spoke("talker")
    assert cm.housekeeping(19).close_idle == []
    assert cm.housekeeping(20).close_idle == ["idle"]


def test_per_ip_limit_evicts_the_oldest_idle_connection_or_refuses() -> None:
    cm = ConnectionManager(ConnLimits(max_inbound_per_ip=2))
    for i, peer in enumerate(("a", "b")):
        assert cm.admit_inbound(peer, "9.9.9.9", i).admit
        cm.opened(peer, "9.9.9.9", True, i)
    cm.spoke("b")
    newcomer = cm.admit_inbound("c", "9.9.9.9", 1.5)
    assert newcomer.admit and newcomer.evict == ("a",)  # the idle one goes, the speaker stays
    cm.closed("a")
    cm.opened("c", "9.9.9.9", True, 1.5)
    cm.spoke("c")
    full = cm.admit_inbound("d", "9.9.9.9", 2)
    assert not full.admit and full.reason == "ip_limit"  # everyone there speaks: refused
    assert cm.admit_inbound("e", "8.8.8.8", 3).admit  # another IP is not affected


def test_per_identity_rate_limit() -> None:
    cm = ConnectionManager(ConnLimits(inbound_per_peer_per_min=3))
    assert [cm.admit_inbound("p", "1.1.1.1", t).admit for t in (0, 1, 2, 3)] == \
        [True, True, True, False]
    assert cm.admit_inbound("p", "1.1.1.1", 3).reason == "peer_rate"
    assert cm.admit_inbound("p", "1.1.1.1", 60.5).admit  # the window moved on


def test_total_inbound_limit() -> None:
    cm = ConnectionManager(ConnLimits(max_inbound=1, max_inbound_per_ip=10))
    cm.opened("a", "1.1.1.1", True, 0)
    cm.spoke("a")
    assert cm.admit_inbound("b", "2.2.2.2", 10).reason == "inbound_limit"


def test_prune_keeps_protected_and_young_peers_and_dials_to_the_low_mark() -> None:
    cm = ConnectionManager(ConnLimits(low_watermark=2, high_watermark=3, grace_s=10))
    for i in range(6):
        cm.opened(f"p{i}", None, i % 2 == 0, 0)
        cm.spoke(f"p{i}")
    cm.opened("young", None, True, 95)
    cm.spoke("young")
    plan = cm.housekeeping(100, protected={"p0", "p2"})
    # p4 (inbound) goes, and one of the three we dialled: two (the low mark) stay.
    assert len(plan.prune) == 2 and not {"p0", "p2", "young"} & set(plan.prune)
    assert "p4" in plan.prune
    assert plan.dial == 0
    for peer in list(cm.conns):
        cm.closed(peer)
    assert cm.housekeeping(100).dial == 2


def test_protected_inbound_identities_never_prune_the_peers_we_dialled() -> None:
    # Issue 38, 6b: a dozen identities in the GossipSub mesh (protected) left no room, and the
    # three peers the node had dialled were pruned; above the low mark, it dialled nobody.
    cm = ConnectionManager(ConnLimits(low_watermark=2, high_watermark=6, grace_s=1))
    for i in range(3):
        cm.opened(f"honest{i}", "198.51.100.1", False, 0)
        cm.spoke(f"honest{i}")
    squatters = {f"s{i}" for i in range(12)}
    for i, peer in enumerate(sorted(squatters)):
        cm.opened(peer, "203.0.113.9", True, 1 + i)
        cm.spoke(peer)
    plan = cm.housekeeping(100, protected=squatters)
    assert len([p for p in plan.prune if p.startswith("honest")]) == 1  # down to the low mark
    plan = cm.housekeeping(100, protected=squatters - {"s0"})
    assert plan.prune[0] == "s0"  # an unprotected inbound one goes before any we dialled


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.booleans(), st.booleans()), max_size=200),
       st.integers(1, 6), st.integers(0, 6))
def test_after_housekeeping_connections_stay_within_the_watermarks(
        events: list[tuple[int, bool, bool]], low: int, extra: int) -> None:
    limits = ConnLimits(low_watermark=low, high_watermark=low + extra, grace_s=0)
    cm = ConnectionManager(limits)
    for now, (peer, opens, speaks) in enumerate(events):
        if opens:
            cm.opened(f"p{peer}", None, peer % 2 == 0, now)
            if speaks:
                cm.spoke(f"p{peer}")
        else:
            cm.closed(f"p{peer}")
    plan = cm.housekeeping(10_000)
    left = len(cm.conns) - len(plan.close_idle) - len(plan.prune)
    assert left <= limits.high_watermark
    assert left + plan.dial >= limits.low_watermark
    assert not set(plan.close_idle) & set(plan.prune)
