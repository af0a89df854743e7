"""The address book's bounds and its resistance to eclipse through fake records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import RemoteProtocolError
from sync.membership import AddressBook, BookLimits, decode_records, encode_records, parse_addr

ME = "12D3KooWme"


def pid(i: int | str) -> str:
    return f"12D3KooWpeer{i}"


def addr(a: int, b: int, c: int = 0, d: int = 1, port: int = 4001) -> str:
    return f"/ip4/{a}.{b}.{c}.{d}/tcp/{port}"


def test_parse_addr_shapes() -> None:
    p = pid(1)
    assert parse_addr("/ip4/1.2.3.4/tcp/4001", p).bucket == "1.2.0.0/16"  # type: ignore[union-attr]
    assert parse_addr(f"/ip4/1.2.3.4/tcp/4001/p2p/{p}", p) is not None
    relayed = parse_addr(f"/ip4/1.2.3.4/tcp/4001/p2p/{pid(9)}/p2p-circuit", p)
    assert relayed is not None and relayed.relayed and relayed.bucket.startswith("relay:")
    for bad in ("/ip4/0.0.0.0/tcp/4001", "/ip4/1.2.3.4/tcp/0", "/ip4/1.2.3/tcp/1",
                "/ip6/1.2.3.4/tcp/1", "/ip4/224.0.0.1/tcp/1", "/ip4/1.2.3.4/udp/1",
                f"/ip4/1.2.3.4/tcp/1/p2p/{p}/p2p-circuit", "x" * 600, ""):
        assert parse_addr(bad, p) is None, bad


def test_offer_rules_on_a_fixed_clock() -> None:
    book = AddressBook(ME, BookLimits(capacity=10, per_bucket=3, per_source=4))
    assert book.offer(ME, [addr(1, 1)], 1, b"r", "src", 0) == "self"
    assert book.offer(pid(1), ["/ip4/0.0.0.0/tcp/1"], 1, b"r", "src", 0) == "no_address"
    assert book.offer(pid(1), [addr(1, 1)], 5, b"r", "src", 0) == "added"
    assert book.offer(pid(1), [addr(2, 2)], 4, b"r", "src", 1) == "stale"
    assert book.offer(pid(1), [addr(2, 2)], 5, b"r", "src", 1) == "unchanged"
    assert book.offer(pid(1), [addr(2, 2)], 6, b"r2", "other", 1) == "updated"
    assert book.entries[pid(1)].addrs == (addr(2, 2),)
    assert book.entries[pid(1)].source == "src"  # credit stays with the first source
    for i in range(2, 5):
        assert book.offer(pid(i), [addr(10, i)], 1, b"r", "src", 1) == "added"
    assert book.offer(pid(5), [addr(10, 5)], 1, b"r", "src", 1) == "source_full"
    assert book.offer(pid(6), [addr(3, 3, 0, 1)], 1, b"r", "a", 1) == "added"
    assert book.offer(pid(7), [addr(3, 3, 0, 2)], 1, b"r", "a", 1) == "added"
    assert book.offer(pid(8), [addr(3, 3, 0, 3)], 1, b"r", "a", 1) == "added"
    assert book.offer(pid(9), [addr(3, 3, 0, 4)], 1, b"r", "b", 1) == "added"  # evicts one of a's
    assert book.source_count("a") == 2
    assert book.offer(pid(10), [addr(3, 3, 0, 5)], 1, b"r", "b", 1) == "bucket_full"  # fair share


def test_dial_outcomes_back_off_and_drop() -> None:
    book = AddressBook(ME, BookLimits(max_failures=2, tried_max_failures=3))
    book.offer(pid(1), [addr(1, 1)], 1, b"r", "s", 0)
    book.learn(pid(2), addr(2, 2) + f"/p2p/{pid(2)}", 0)
    assert book.entries[pid(2)].tried and book.entries[pid(2)].source == ""
    assert [e.peer_id for e in book.candidates(0, (), 10)] == [pid(2), pid(1)]
    assert not book.dial_failed(pid(1), 10)
    assert book.candidates(10, (), 10)[0].peer_id == pid(2)
    assert [e.peer_id for e in book.candidates(10, (), 10)] == [pid(2)]  # pid 1 backs off
    assert book.dial_failed(pid(1), 20)
    assert pid(1) not in book
    assert not book.dial_failed(pid(2), 1) and not book.dial_failed(pid(2), 2)
    book.connected(pid(2), 3)
    assert book.entries[pid(2)].failures == 0
    assert book.entries[pid(2)].dial_addrs() == [f"{addr(2, 2)}/p2p/{pid(2)}"]


def test_candidates_spread_over_buckets() -> None:
    book = AddressBook(ME, BookLimits(per_bucket=100, per_source=100))
    for i in range(10):
        book.offer(pid(f"a{i}"), [addr(1, 1, 0, i + 1)], 1, b"r", "s", i)
    book.offer(pid("b"), [addr(2, 2)], 1, b"r", "s", 50)
    book.offer(pid("c"), [addr(3, 3)], 1, b"r", "s", 60)
    chosen = book.candidates(100, (), 3)
    assert {e.bucket for e in chosen} == {"1.1.0.0/16", "2.2.0.0/16", "3.3.0.0/16"}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 5), st.integers(0, 8),
                          st.integers(0, 3), st.booleans()), max_size=300))
def test_bounds_hold_whatever_is_offered(ops: list[tuple[int, int, int, int, bool]]) -> None:
    limits = BookLimits(capacity=20, per_bucket=6, per_source=5)
    book = AddressBook(ME, limits)
    for now, (peer, src, net, seq, tried) in enumerate(ops):
        source = f"s{src}" if src else ""
        book.offer(pid(peer), [addr(net, net, 0, peer % 200 + 1)], seq, b"r", source, now)
        if tried:
            book.connected(pid(peer), now)
        assert len(book) <= limits.capacity
        counts: dict[str, int] = {}
        buckets: dict[str, int] = {}
        for e in book.entries.values():
            counts[e.source] = counts.get(e.source, 0) + 1
            buckets[e.bucket] = buckets.get(e.bucket, 0) + 1
        assert all(n <= limits.per_source for s, n in counts.items() if s)
        assert all(n <= limits.per_bucket for n in buckets.values())
        assert counts == {s: book.source_count(s) for s in counts}


@settings(max_examples=100, deadline=None)
@given(honest=st.integers(1, 12), attackers=st.integers(1, 40), per_attacker=st.integers(1, 80),
       same_net=st.booleans())
def test_a_flood_of_fake_records_cannot_evict_honest_peers(
        honest: int, attackers: int, per_attacker: int, same_net: bool) -> None:
    """Honest peers we connected to stay, whatever many sources flood us with."""
    book = AddressBook(ME, BookLimits(capacity=64, per_bucket=16, per_source=8))
    for i in range(honest):
        assert book.learn(pid(f"h{i}"), addr(127, 0, 0, 1, 5000 + i), 0) == "added"
    t = 1
    for a in range(attackers):
        for j in range(per_attacker):
            # Fake peers claim addresses in the honest peers' own network, or all over.
            net = (127, 0) if same_net else (198, 18 + j % 2)
            book.offer(pid(f"x{a}-{j}"), [addr(*net, j % 250, a % 250 + 1)], 1, b"r", f"evil{a}",
                       t)
            t += 1
    assert all(pid(f"h{i}") in book for i in range(honest))
    assert all(book.source_count(f"evil{a}") <= 8 for a in range(attackers))


def test_px_wire_round_trip_and_bounds() -> None:
    records = [b"a" * 10, b"", b"b" * 300]
    assert decode_records(encode_records(records), 3, 300) == records
    for data, count, size in ((encode_records(records), 2, 300),  # too many records
                              (encode_records(records), 3, 299),  # one too large
                              (encode_records(records)[:-1], 3, 300),  # truncated
                              (encode_records(records) + b"x", 3, 300),  # trailing bytes
                              (b"\xff" * 12, 3, 300)):  # not a varint
        with pytest.raises(RemoteProtocolError):
            decode_records(data, count, size)


def test_a_source_share_holds_after_its_entries_are_dialled() -> None:
    """Issue 38, finding 3: dialling a source's entries (connected, or learn on an outbound
    connection) used to move their credit to us, so one source got 38 entries kept, bound 32."""
    book = AddressBook(ME, BookLimits(per_source=4, per_bucket=100))
    for i in range(12):
        if book.offer(pid(i), [addr(198, 18, 0, i + 1)], 1, b"r", "evil", i) == "added":
            book.connected(pid(i), i)  # we dialled it, it answered
            book.learn(pid(i), addr(198, 18, 0, i + 1) + f"/p2p/{pid(i)}", i)
            book.learn(pid(i), addr(198, 19, 0, i + 1) + f"/p2p/{pid(i)}", i)  # a new address
    assert book.source_count("evil") == 4
    assert len(book) == 4 and all(e.source == "evil" and e.tried for e in book.entries.values())


def test_a_forgotten_peer_is_refused_until_the_operator_joins_it_again() -> None:
    # ``peers forget`` did not last: the forgotten peer dialled us back within seconds, its
    # peer exchange offered its own record, and the next start dialled it from the saved book.
    book = AddressBook(ME, BookLimits(forgotten=2))
    assert book.offer(pid(1), [addr(1, 1)], 1, b"r", "src", 0) == "added"
    assert book.forget(pid(1), 10.0)
    assert pid(1) not in book
    assert book.offer(pid(1), [addr(1, 1)], 2, b"r", pid(1), 11) == "forgotten"
    assert book.offer(pid(1), [addr(1, 1)], 2, b"r", "other", 11) == "forgotten"
    assert book.learn(pid(1), f"{addr(1, 1)}/p2p/{pid(1)}", 11) == "forgotten"
    assert pid(1) not in book
    # Our own knowledge (a configured bootstrap address) still counts.
    assert book.offer(pid(1), [addr(1, 1)], 0, b"", "", 12) == "added"
    # The operator joins it again: learnt as any peer.
    book.remember(pid(1))
    assert book.learn(pid(1), f"{addr(2, 2)}/p2p/{pid(1)}", 13) == "updated"
    # Bounded: the oldest forgotten peers go first (forgetting again makes one the newest).
    assert not book.forget(pid(2), 20) and not book.forget(pid(3), 21)
    assert not book.forget(pid(2), 22)
    assert not book.forget(pid(4), 23)
    assert list(book.forgotten) == [pid(2), pid(4)]
    assert book.offer(pid(3), [addr(3, 3)], 1, b"r", "src", 24) == "added"
