"""The reachability rules on a fixed clock: verdict, relay choice, hole-punch plan, rate gate."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sync.networks import NetworkShare, network_of
from sync.reachability import (
    PRIVATE,
    PUBLIC,
    UNKNOWN,
    PunchPlanner,
    RateGate,
    ReachabilityConfig,
    ReachabilityCore,
    RelayPlanner,
    address_scope,
)

CFG = ReachabilityConfig(confirmations=2, evidence_ttl_s=100, probe_interval_s=10,
                         relays_wanted=2, relay_retry_s=5, reservation_refresh_s=50,
                         punch_delay_s=1, punch_attempts=3, punch_backoff_s=2)


def test_address_scopes() -> None:
    assert address_scope("127.0.0.1") == "loopback"
    assert address_scope("0.0.0.0") == "unspecified"
    assert address_scope("100.64.3.10") == "local"  # carrier-grade NAT space
    assert address_scope("192.168.1.2") == "local"
    assert address_scope("198.18.0.10") == "global"  # the emulated internet
    assert address_scope("8.8.8.8") == "global"
    assert address_scope("fe80::1") == "local"
    assert address_scope("nonsense") == "invalid"


# Answering peers' own IPs: three /16 networks of the emulated internet, and a LAN.
NET_A, NET_A2, NET_B, NET_C, LAN = "198.18.0.10", "198.18.7.7", "198.19.0.10", "203.0.113.5", \
    "192.168.1.20"


def test_verdict_needs_confirmations_from_distinct_networks() -> None:
    core = ReachabilityCore(CFG)
    assert core.verdict(0) is UNKNOWN
    core.observe("a", "198.18.0.10", True, 0, peer_ip=NET_A)
    core.observe("a", "198.18.0.10", True, 1, peer_ip=NET_A)  # the same peer twice is one
    core.observe("a2", "198.18.0.10", True, 1, peer_ip=NET_A2)  # so is its /16 (free ids)
    assert core.verdict(1) is UNKNOWN
    core.observe("b", "198.18.0.10", True, 2, peer_ip=NET_B)
    assert core.verdict(2) is PUBLIC
    assert core.verdict(200) is UNKNOWN  # evidence expires


def test_private_after_failures_and_lan_answers_do_not_count() -> None:
    core = ReachabilityCore(CFG)
    assert core.observe("lan-neighbour", "100.64.0.10", True, 0, peer_ip=LAN) == "ignored"
    core.observe("lan-2", "100.64.0.10", True, 0, peer_ip=LAN)  # same LAN: proves nothing
    assert core.verdict(0) is UNKNOWN and core.ignored == 2
    core.observe("p0", "198.18.1.10", False, 1, peer_ip=NET_A)
    core.observe("p1", "198.18.1.10", False, 1, peer_ip=NET_B)
    assert core.verdict(1) is PRIVATE
    # Successes from as many networks as failed do not make it public: failures veto.
    core.observe("p2", "198.18.1.10", True, 2, peer_ip=NET_C)
    core.observe("p3", "198.18.1.10", True, 2, peer_ip="198.51.100.1")
    assert core.verdict(2) is UNKNOWN
    core.observe("p4", "198.18.1.10", True, 3, peer_ip="192.0.2.1")
    assert core.verdict(3) is PUBLIC


def test_lies_are_refused_and_reported() -> None:
    # Issue 38 finding 1: two fresh identities on our own machine answered "ok 198.18.0.99"
    # (never dialled) and the node went public.
    core = ReachabilityCore(CFG)
    assert core.observe("s1", "198.18.0.99", True, 0, peer_ip="127.0.0.1") == "mismatch"
    assert core.observe("s2", "198.18.0.99", False, 0, peer_ip=LAN) == "mismatch"
    assert core.observe("s3", "198.18.0.99", True, 0, peer_ip=NET_A,
                        arrived=False) == "unverified"
    assert core.observe("s4", "198.18.0.99", True, 0, peer_ip=NET_B,
                        arrived=False) == "unverified"
    assert core.verdict(0) is UNKNOWN and core.punch_addrs(4003, 0) == []
    assert core.lies == {"mismatch": 2, "unverified": 2}
    # A failure needs no arrival (nothing came): it counts.
    assert core.observe("h", "198.18.1.10", False, 0, peer_ip=NET_C, arrived=False) == "counted"


def test_a_network_votes_once_and_peers_we_dialled_speak_for_it() -> None:
    core = ReachabilityCore(CFG)
    core.observe("ours", "198.18.1.10", False, 0, peer_ip=NET_A, outbound=True)
    core.observe("stranger", "198.18.1.10", True, 1, peer_ip=NET_A2)  # same /16, inbound
    core.observe("b", "198.18.1.10", True, 1, peer_ip=NET_B)
    assert core.counts(1) == {"success": 1, "failure": 1, "lies": 0}
    assert core.verdict(1) is UNKNOWN
    # Evidence per network is capped: strangers' answers are dropped first.
    for i in range(10):
        core.observe(f"s{i}", "198.18.1.10", True, 2, peer_ip=f"198.18.9.{i}")
    kept = [p for p in ("ours", "stranger", *(f"s{i}" for i in range(10)))
            if p in core._evidence]
    assert len(kept) == CFG.evidence_per_network and "ours" in kept


def test_one_network_cannot_put_its_address_first_for_punching() -> None:
    core = ReachabilityCore(CFG)
    core.observe("p0", "198.18.1.10", False, 0, peer_ip=NET_A)
    core.observe("p1", "198.18.1.10", False, 0, peer_ip=NET_B)
    core.observe("x", "198.18.0.99", False, 5, peer_ip=NET_C)  # newer, one network
    assert core.punch_addrs(4003, 5)[0] == "/ip4/198.18.1.10/tcp/4003"


def test_ask_each_peer_once_per_interval() -> None:
    core = ReachabilityCore(CFG)
    assert core.to_ask(["a", "b"], 0) == ["a", "b"]
    assert core.to_ask(["a", "b", "c"], 5) == ["c"]
    assert core.to_ask(["a", "b", "c"], 10) == ["a", "b"]


def test_evidence_is_bounded() -> None:
    core = ReachabilityCore(ReachabilityConfig(max_evidence=4))
    for i in range(100):
        core.observe(f"p{i}", f"198.18.0.{i % 200}", bool(i % 2), float(i),
                     peer_ip=f"198.{i}.0.1")
    assert len(core._evidence) <= 4
    assert len(core.punch_addrs(4003, 100)) <= 4


def test_punch_addresses_come_from_evidence_that_outlives_connections() -> None:
    # Issue 27: after an outage had closed every remote connection, libp2p knew only the
    # address LAN neighbours see and a NAT'd node told the other side to dial its private
    # address. The IPs peers saw us on, with our listen port, are what a punch must dial.
    core = ReachabilityCore(CFG)
    assert core.punch_addrs(4003, 0) == []
    core.observe("lan", "100.64.0.11", True, 0, peer_ip=LAN)  # a neighbour's view
    core.observe("p0", "198.18.1.10", False, 1, peer_ip=NET_A)
    core.observe("p1", "198.18.1.10", False, 2, peer_ip=NET_B)
    assert core.punch_addrs(4003, 50) == ["/ip4/198.18.1.10/tcp/4003"]
    core.observe("p0", "198.18.1.20", False, 60, peer_ip=NET_A)  # new WAN IP: newest first
    assert core.punch_addrs(4003, 61) == ["/ip4/198.18.1.20/tcp/4003",
                                          "/ip4/198.18.1.10/tcp/4003"]
    assert core.punch_addrs(4003, 61, limit=1) == ["/ip4/198.18.1.20/tcp/4003"]
    assert core.punch_addrs(4003, 155) == ["/ip4/198.18.1.20/tcp/4003"]  # the old one expired
    assert core.punch_addrs(4003, 161) == []
    core.observe("p0", "2001:db8::7", True, 200, peer_ip="2001:db8:1::1")
    assert core.punch_addrs(4003, 200) == ["/ip6/2001:db8::7/tcp/4003"]
    assert core.punch_addrs(0, 200) == []  # no TCP listen port: nothing to predict


def test_relays_reserved_up_to_wanted_and_refreshed() -> None:
    plan = RelayPlanner(CFG)
    assert plan.to_reserve(PUBLIC, ["r1", "r2"], 0) == []
    assert plan.to_reserve(PRIVATE, ["r1", "r2", "r3"], 0) == ["r1", "r2"]
    plan.reserved_ok("r1", 0)
    plan.refused("r2", 0)
    assert plan.to_reserve(PRIVATE, ["r1", "r2", "r3"], 1) == ["r3"]  # r2 backed off
    plan.reserved_ok("r3", 1)
    assert plan.to_reserve(PRIVATE, ["r1", "r2", "r3"], 2) == []
    assert plan.to_reserve(PRIVATE, ["r1", "r2", "r3"], 50) == ["r1"]  # refresh due
    plan.lost("r3")
    assert plan.to_reserve(PRIVATE, ["r1", "r2", "r3"], 51) == ["r1", "r2"]
    assert plan.relays() == ["r1"]


def test_only_the_accepting_side_punches_with_backoff() -> None:
    punch = PunchPlanner(CFG)
    punch.relayed("dialer", accepted=False, dialed=True, us="m", now=0)
    punch.relayed("acceptor", accepted=True, dialed=False, us="m", now=0)
    assert punch.due(0.5) == []
    assert punch.get_timer() == 1
    assert punch.due(1) == ["acceptor"]
    assert punch.due(1) == []  # in flight
    punch.result("acceptor", False, 2)
    assert punch.due(3) == [] and punch.due(4) == ["acceptor"]  # backoff 2 s
    punch.result("acceptor", False, 4)
    assert punch.due(7) == [] and punch.due(8) == ["acceptor"]  # then 4 s
    punch.result("acceptor", False, 8)
    assert punch.gave_up == 1 and punch.due(100) == []  # 3 attempts, then a rest
    assert punch.due(8 + CFG.punch_rest_s) == ["acceptor"]
    punch.gone("acceptor")
    assert punch.pending() == 0


def test_a_relayed_connection_to_a_public_peer_moves_to_the_direct_path_whoever_dialled() -> None:
    # A public node that reached a home through a circuit at another public node: the home
    # dials it directly (on d9bdd2e only the accepting side acted, and the circuit died with
    # the relay).
    punch = PunchPlanner(CFG)
    punch.relayed("public", accepted=False, dialed=True, us="m", now=0, dialable=True)
    punch.relayed("home", accepted=False, dialed=True, us="m", now=0, dialable=False)
    assert punch.due(1) == ["public"]


def test_backoff_is_capped() -> None:
    punch = PunchPlanner(ReachabilityConfig(punch_attempts=20, punch_backoff_s=2,
                                            punch_backoff_max_s=5, punch_delay_s=0))
    punch.relayed("p", accepted=True, dialed=False, us="a", now=0)
    now = 0.0
    for _ in range(10):
        assert punch.due(now) == ["p"]
        punch.result("p", False, now)
        timer = punch.get_timer()
        assert timer is not None and timer - now <= 5
        now = timer


def test_direct_connection_cancels_the_plan() -> None:
    punch = PunchPlanner(CFG)
    punch.relayed("p", accepted=True, dialed=False, us="m", now=0)
    punch.direct("p")
    assert punch.due(10) == [] and punch.pending() == 0
    punch.relayed("q", accepted=True, dialed=False, us="m", now=0)
    punch.result("q", True, 1)
    assert punch.succeeded == 1 and punch.pending() == 0


def test_crossed_relayed_dials_leave_one_puncher() -> None:
    a, b = PunchPlanner(CFG), PunchPlanner(CFG)
    a.relayed("B", accepted=True, dialed=True, us="A", now=0)
    b.relayed("A", accepted=True, dialed=True, us="B", now=0)
    assert (a.pending(), b.pending()) == (1, 0)


def test_a_waiting_side_takes_over_when_the_other_never_punches() -> None:
    # Seen after an outage (both sides redial through relays at once): B sees both relayed
    # connections and waits for A (the smaller id), but A sees only the one it dialled, so it
    # does not punch either. On 645de8f the pair stayed relayed for good.
    cfg = ReachabilityConfig(punch_delay_s=1, punch_follow_s=15)
    a, b = PunchPlanner(cfg), PunchPlanner(cfg)
    for now in range(0, 15):
        a.relayed("B", accepted=False, dialed=True, us="A", now=now)
        b.relayed("A", accepted=True, dialed=True, us="B", now=now)
        assert (a.pending(), b.pending()) == (0, 0)
    b.relayed("A", accepted=True, dialed=True, us="B", now=15)
    assert b.due(16) == ["A"] and a.pending() == 0
    # A pair that turned direct (or left) and comes back relayed waits afresh.
    b.direct("A")
    b.relayed("A", accepted=True, dialed=True, us="B", now=100)
    assert b.pending() == 0 and b.planned() == ["A"]
    b.gone("A")
    assert b.planned() == []
    # The side that only dialled never takes over: the accepting side leads or follows.
    a.relayed("B", accepted=False, dialed=True, us="A", now=1000)
    assert a.pending() == 0


def test_no_punching_when_disabled() -> None:
    punch = PunchPlanner(ReachabilityConfig(hole_punch=False))
    punch.relayed("p", accepted=True, dialed=False, us="m", now=0)
    assert punch.pending() == 0


@given(st.lists(st.tuples(st.integers(1, 100_000), st.floats(0, 2)), min_size=1, max_size=200))
def test_rate_gate_never_exceeds_rate_plus_burst(steps: list[tuple[int, float]]) -> None:
    rate, burst = 10_000.0, 20_000.0
    gate = RateGate(rate, burst, 0.0)
    now, sent = 0.0, 0
    for size, gap in steps:
        now += gap
        now += gate.delay(size, now)  # the driver waits this long before forwarding
        sent += size
        assert sent <= burst + rate * now + 1e-6


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="serve_relay"):
        ReachabilityConfig(serve_relay="maybe")
    with pytest.raises(ValueError, match="relays_wanted"):
        ReachabilityConfig(relays_wanted=0)
    with pytest.raises(ValueError, match="punch_backoff_s"):
        ReachabilityConfig(punch_backoff_s=-1)


def test_network_share() -> None:
    assert network_of("198.18.3.4", 16, 32) == "198.18.0.0/16"
    assert network_of("::ffff:198.18.3.4", 24, 48) == "198.18.3.0/24"
    assert network_of("2001:db8:1:2::9", 16, 48) == "2001:db8:1::/48"
    assert network_of("nonsense", 16, 32) is None and network_of(None, 16, 32) is None
    share = NetworkShare(2)
    assert share.take("a", "n1") and share.take("b", "n1") and share.take("a", "n1")
    assert not share.take("c", "n1") and share.refused == 1
    assert share.take("c", "n2") and share.most() == 2
    share.release("a")
    assert share.take("c2", "n1")
    share.keep_only({"c"})
    assert share.held("n1") == 0 and share.held("n2") == 1
