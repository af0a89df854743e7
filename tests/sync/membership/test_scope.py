"""Address scope: what a peer may make us dial, given where we reach it."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from sync.membership.scope import (
    SCOPE_REASONS,
    addr_host,
    addr_refusal,
    in_scope,
    relay_of,
    scope_of,
    source_ip,
)

PRIVATE_BLOCKS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")


def test_scopes_of_addresses() -> None:
    assert scope_of("127.0.0.1").kind == scope_of("::1").kind == "loopback"
    assert scope_of("localhost").kind == scope_of("a.localhost.").kind == "loopback"
    assert scope_of("::ffff:127.0.0.2").kind == "loopback"
    assert scope_of("10.1.2.3").block == "10.0.0.0/8"
    assert scope_of("100.64.0.2").block == "100.64.0.0/10"
    assert scope_of("fd00::1").block == "fc00::/7"
    assert scope_of("169.254.1.1").kind == scope_of("fe80::1").kind == "link_local"
    # 198.18.0.0/15 is the emulated internet of tests/net; documentation nets are global too.
    for ip in ("198.18.0.5", "192.0.2.2", "8.8.8.8", "2001:db8::1", None):
        assert scope_of(ip).kind == "global", ip
    for ip in ("0.0.0.0", "::", "224.0.0.1", "255.255.255.255", "240.0.0.1", "0.1.2.3",
               "example.com", ""):
        assert scope_of(ip).kind == "invalid", ip


def test_the_rule_same_scope_as_the_source() -> None:
    assert in_scope("8.8.8.8", "127.0.0.1") is None  # global: from anyone
    assert in_scope("127.0.0.1", "127.0.0.1") is None  # both on this host: the tests' case
    assert in_scope("127.0.0.1", "198.18.0.7") == "loopback"
    assert in_scope("127.0.0.1", None) == "loopback"
    assert in_scope("127.0.0.1", "10.0.0.1") == "loopback"
    assert in_scope("10.9.9.9", "10.0.0.1") is None  # the same private network
    assert in_scope("192.168.1.1", "10.0.0.1") == "private"
    assert in_scope("10.0.0.1", "198.18.0.7") == "private"
    assert in_scope("10.0.0.1", "127.0.0.1") == "private"  # loopback is not the LAN
    assert in_scope("100.64.0.9", "100.64.0.2") is None
    assert in_scope("169.254.0.1", "198.18.0.7") == "link_local"
    assert in_scope("0.0.0.0", "127.0.0.1") == "invalid"


def test_multiaddrs() -> None:
    relayed = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWrelay/p2p-circuit"
    assert addr_host(relayed) == ("ip4", "127.0.0.1")  # the relay's address counts
    assert addr_refusal(relayed, "198.18.0.1") == "loopback"
    assert addr_refusal("/ip6/::1/tcp/4001", "2001:db8::5") == "loopback"
    assert addr_refusal("/ip4/198.18.3.4/tcp/4001", "192.168.0.4") is None
    assert addr_refusal("/dns4/localhost/tcp/4001", "198.18.0.1") == "loopback"
    assert addr_refusal("/dns4/example.com/tcp/4001", "198.18.0.1") == "dns"
    assert addr_refusal("/dns4/example.com/tcp/4001", "198.18.0.1", names=True) is None
    assert addr_refusal("/dns4/example.com/tcp/4001", "127.0.0.1") is None
    # A relayed connection's remote address names no IP: its relay's connection tells.
    assert relay_of("/p2p/12D3KooWrelay/p2p-circuit/p2p/12D3KooWpeer") == "12D3KooWrelay"
    assert relay_of("/ip4/1.2.3.4/tcp/1") is None and relay_of(None) is None
    assert source_ip("/ip4/1.2.3.4/tcp/1") == "1.2.3.4" and source_ip(None) is None
    for bad in ("", "/", "/tcp/1", "/unix/x", "ip4/1.2.3.4/tcp/1", "/ip4//tcp/1"):
        assert addr_refusal(bad, "127.0.0.1") == "invalid", bad


ips_v4 = st.integers(0, 2**32 - 1).map(lambda n: str(ipaddress.IPv4Address(n)))
ips_v6 = st.integers(0, 2**128 - 1).map(lambda n: str(ipaddress.IPv6Address(n)))
ips = st.one_of(ips_v4, ips_v6, st.sampled_from(["127.0.0.1", "10.0.0.1", "192.168.5.5",
                                                  "100.64.1.1", "fd12::1", "fe80::2",
                                                  "169.254.3.3", "198.18.0.1", "::1"]))


@given(target=ips, source=st.one_of(st.none(), ips))
def test_properties(target: str, source: str | None) -> None:
    reason = in_scope(target, source)
    assert reason is None or reason in SCOPE_REASONS
    ip = ipaddress.ip_address(target)
    mapped = getattr(ip, "ipv4_mapped", None) or ip
    if mapped.is_loopback and reason is None:  # loopback only ever from this host
        assert source is not None and scope_of(source).kind == "loopback"
    if any(mapped in ipaddress.ip_network(b) for b in PRIVATE_BLOCKS if mapped.version == 4) \
            and reason is None:  # private only from the same block
        assert source is not None and scope_of(source) == scope_of(target)
    if scope_of(target).kind == "global":
        assert reason is None
    # Anything the source itself is at, it may tell us (same network), unless undialable.
    if source is not None and scope_of(source).kind != "invalid":
        assert in_scope(source, source) is None
    assert addr_refusal(f"/ip{ip.version}/{target}/tcp/4001", source) == reason
