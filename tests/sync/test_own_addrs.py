"""sync.own_addrs: what a node's signed record lists of its own addresses."""

from __future__ import annotations

from sync.own_addrs import own_addrs
from sync.reachability import ReachabilityConfig, ReachabilityCore

IFACES = ["127.0.0.1", "100.64.0.10", "198.18.0.10", "::1", "fe80::1", "169.254.3.4", "2001:db8::5"]


def test_a_wildcard_stands_for_the_dialable_interface_addresses_global_first() -> None:
    # On d9bdd2e a wildcard listen address was dropped: the record listed no direct address,
    # and peers never learnt a public node through peer exchange.
    assert own_addrs(["/ip4/0.0.0.0/tcp/4001/p2p/12D3KooWx"], IFACES) == [
        "/ip4/198.18.0.10/tcp/4001", "/ip4/100.64.0.10/tcp/4001"]
    assert own_addrs(["/ip6/::/tcp/4001"], IFACES) == ["/ip6/2001:db8::5/tcp/4001"]


def test_concrete_listen_addresses_stay_as_they_are() -> None:
    assert own_addrs(["/ip4/127.0.0.1/tcp/4001", "/ip4/100.64.0.10/tcp/4002"], IFACES) == [
        "/ip4/127.0.0.1/tcp/4001", "/ip4/100.64.0.10/tcp/4002"]


def test_confirmed_addresses_come_first_and_the_list_is_bounded() -> None:
    many = [f"198.18.1.{i}" for i in range(20)]
    out = own_addrs(["/ip4/0.0.0.0/tcp/4001"], many, confirmed=["/ip4/203.0.113.7/tcp/4001"],
                    limit=4)
    assert out[0] == "/ip4/203.0.113.7/tcp/4001"
    assert len(out) == 4


def test_confirmed_addrs_are_global_ips_dial_backs_reached_confirmed_by_distinct_networks(
) -> None:
    core = ReachabilityCore(ReachabilityConfig(evidence_ttl_s=100, confirmations=2))
    core.observe("a", "198.18.1.10", True, now=0, peer_ip="198.18.0.10")
    assert core.confirmed_addrs(4001, now=1) == []  # one peer's word is not enough
    core.observe("s", "198.18.1.10", True, now=1, peer_ip="198.18.0.11")
    assert core.confirmed_addrs(4001, now=1) == []  # nor a second identity of its network
    core.observe("b", "198.18.1.10", True, now=1, peer_ip="198.19.0.10")
    core.observe("c", "198.18.1.11", False, now=1, peer_ip="198.19.0.11")  # not reached
    core.observe("d", "100.64.0.10", True, now=2, peer_ip="100.64.0.1")  # a neighbour
    core.observe("e", "100.64.0.10", True, now=2, peer_ip="100.64.0.2")
    assert core.confirmed_addrs(4001, now=50) == ["/ip4/198.18.1.10/tcp/4001"]
    assert core.confirmed_addrs(4001, now=102) == []  # expired
    assert core.confirmed_addrs(0, now=50) == []
