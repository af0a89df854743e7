"""Liveness (sync.membership.liveness) on a fixed clock: repeated ping failures close a
connection, and the outage they reveal neither marks peers dead nor backs them off for
minutes; the first successful dial makes every entry due again."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sync.membership import AddressBook, Liveness

PEER = "12D3KooWPeerA"


def test_closes_only_after_max_failures_in_a_row() -> None:
    live = Liveness(max_failures=3)
    assert not live.ping_failed(PEER, 100.0)
    assert not live.ping_failed(PEER, 115.0)
    live.ping_ok(PEER)  # an answer resets the count
    assert not live.ping_failed(PEER, 130.0)
    assert not live.ping_failed(PEER, 145.0)
    assert live.outage_since is None
    assert live.ping_failed(PEER, 160.0)
    assert live.outage_since == 160.0
    assert PEER not in live.failures


def test_closed_connection_forgets_its_count() -> None:
    live = Liveness(max_failures=2)
    assert not live.ping_failed(PEER, 1.0)
    live.closed(PEER)
    assert not live.ping_failed(PEER, 2.0)


def test_outage_retries_without_marks_then_network_back_makes_all_due() -> None:
    book = AddressBook("me")
    addr = "/ip4/198.18.0.5/tcp/4001/p2p/" + PEER
    book.offer(PEER, [addr], 0, b"", "", 0.0)
    book.connected(PEER, 0.0)
    live = Liveness(max_failures=1, outage_retry_s=5.0)
    assert live.dial_failed_retry_at(10.0) is None  # no outage: the book's back-off applies
    book.dial_failed(PEER, 10.0)
    assert book.entries[PEER].failures == 1
    assert live.ping_failed("other", 20.0)  # a dead connection: an outage begins
    retry = live.dial_failed_retry_at(30.0)
    assert retry == 35.0
    book.retry_at(PEER, retry)
    entry = book.entries[PEER]
    assert (entry.failures, entry.next_attempt) == (1, 35.0)
    # Many failed dials during a long outage never drop the entry.
    for t in range(40, 75, 5):
        book.retry_at(PEER, live.dial_failed_retry_at(float(t)) or 0.0)
    assert PEER in book
    # A second entry backed off for minutes before the outage.
    other = "12D3KooWPeerB"
    book.offer(other, ["/ip4/198.18.0.6/tcp/4001/p2p/" + other], 0, b"", "", 0.0)
    for _ in range(4):
        book.dial_failed(other, 50.0)
    assert book.entries[other].next_attempt >= 80.0
    assert [e.peer_id for e in book.candidates(79.0, (), 8)] == [PEER]
    assert live.dialled_ok()  # the network is back
    book.all_due()
    assert {e.peer_id for e in book.candidates(79.0, (), 8)} == {PEER, other}
    assert not live.dialled_ok()  # only the first success ends the outage


@given(st.lists(st.booleans(), max_size=60), st.integers(1, 6))
def test_closes_exactly_at_each_run_of_max_failures(answers: list[bool], limit: int) -> None:
    live = Liveness(max_failures=limit)
    run = 0
    for t, answered in enumerate(answers):
        if answered:
            live.ping_ok(PEER)
            run = 0
            continue
        run += 1
        closed = live.ping_failed(PEER, float(t))
        assert closed == (run == limit)
        if closed:
            run = 0


def test_rejects_nonsense_limits() -> None:
    with pytest.raises(ValueError):
        Liveness(max_failures=0)
