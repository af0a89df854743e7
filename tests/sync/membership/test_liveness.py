"""Liveness (sync.membership.liveness) on a fixed clock: repeated ping failures close a
connection; when every remote peer stops answering, the outage that reveals neither marks peers
dead nor backs them off for minutes, asks for a probe dial every second, and the first dial or
remote answer that gets through ends it (close what is stuck, every entry due)."""

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
    live.ping_ok(PEER, 120.0)  # an answer resets the count
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
    assert live.dialled_ok() is not None  # the network is back
    book.all_due()
    assert {e.peer_id for e in book.candidates(79.0, (), 8)} == {PEER, other}
    assert live.dialled_ok() is None  # only the first success ends the outage


@given(st.lists(st.booleans(), max_size=60), st.integers(1, 6))
def test_closes_exactly_at_each_run_of_max_failures(answers: list[bool], limit: int) -> None:
    live = Liveness(max_failures=limit)
    run = 0
    for t, answered in enumerate(answers):
        if answered:
            live.ping_ok(PEER, float(t))
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


def test_one_dead_peer_is_no_outage() -> None:
    """Our other remote peers keep answering: the dead one is closed, our network is fine."""
    live = Liveness(max_failures=2)
    live.ping_ok("alive", 0.0)
    assert not live.ping_failed(PEER, 5.0)
    live.ping_ok("alive", 6.0)
    assert live.ping_failed(PEER, 10.0)
    assert not live.in_outage
    assert live.dial_failed_retry_at(11.0) is None
    assert not live.probe_due(11.0)


def test_lan_answers_do_not_hide_an_outage() -> None:
    """Our uplink is down: the neighbour on our LAN answers, every remote peer is silent."""
    live = Liveness(max_failures=2, probe_s=1.0)
    live.ping_ok("remote-a", 0.0)
    live.ping_ok("remote-b", 0.0)
    for t in (5.0, 10.0):
        live.ping_ok("lan-neighbour", t, remote=False)
        live.ping_failed("remote-b", t)
        closed_a = live.ping_failed("remote-a", t + 0.5)
    assert closed_a and live.in_outage and live.outage_since == 10.0
    assert live.probe_due(10.0)
    assert not live.probe_due(10.5)
    assert live.probe_due(11.0)


def test_network_back_closes_what_is_stuck() -> None:
    """A connection that failed a ping and was not yet closed is stuck in TCP back-off when
    the network returns: the first dial through says close it; answered ones stay."""
    live = Liveness(max_failures=3)
    live.ping_ok("lan", 0.0, remote=False)
    for t in (5.0, 10.0, 15.0):
        live.ping_failed("a", t)
    assert live.in_outage
    live.ping_failed("b", 16.0)  # one failure so far: still open, but stuck
    live.ping_ok("lan", 16.0, remote=False)
    back = live.dialled_ok()
    assert back is not None and back.since == 15.0 and back.close == ("b",)
    assert not live.in_outage and not live.failures
    assert live.dialled_ok() is None


def test_a_remote_answer_ends_the_outage() -> None:
    live = Liveness(max_failures=1)
    assert live.ping_failed("a", 1.0)
    assert live.in_outage
    assert live.ping_ok("lan", 2.0, remote=False) is None
    assert live.in_outage
    back = live.ping_ok("a", 3.0)
    assert back is not None and not live.in_outage


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "lan"]), st.booleans()),
                max_size=80))
def test_outage_iff_no_remote_answer_since_the_closed_one_began_failing(
        pings: list[tuple[str, bool]]) -> None:
    """Property: an outage begins exactly when a remote connection closes with no remote
    answer since its first failure in the run, and any remote answer or dial ends it."""
    live = Liveness(max_failures=2)
    last_ok: float | None = None
    since: dict[str, float] = {}
    runs: dict[str, int] = {}
    outage = False
    for t, (peer, answered) in enumerate(pings):
        now = float(t)
        remote = peer != "lan"
        if answered:
            back = live.ping_ok(peer, now, remote)
            runs.pop(peer, None)
            since.pop(peer, None)
            if remote:
                assert (back is not None) == outage
                if back is not None:  # the suspects (a failed ping, still open) close
                    assert set(back.close) == set(runs)
                    runs.clear()
                    since.clear()
                outage, last_ok = False, now
            continue
        since.setdefault(peer, now)
        runs[peer] = runs.get(peer, 0) + 1
        closed = live.ping_failed(peer, now, remote)
        assert closed == (runs[peer] == 2)
        if closed:
            if remote and (last_ok is None or last_ok < since[peer]):
                outage = True
            runs.pop(peer)
            since.pop(peer)
        assert live.in_outage == outage


# -- loaded, not dead (issue 27: a healthy connection was closed ~35 s into a loaded test run) --


def test_a_peer_heard_from_during_the_ping_is_not_counted_dead() -> None:
    """Its pings time out (its answers queue behind a busy machine) but it opens streams to
    us, or accepts ours: alive. On b4adb7a's rule three timeouts closed it."""
    live = Liveness(max_failures=3)
    for sent in (0.0, 6.0, 12.0, 18.0, 24.0):
        live.heard(PEER, sent + 2.0)  # a Recon session it opened while the ping waited
        assert not live.ping_failed(PEER, sent + 5.0, sent_at=sent)
    assert live.excused == 5 and PEER not in live.failures
    assert not live.in_outage


def test_heard_before_the_ping_was_sent_proves_nothing() -> None:
    live = Liveness(max_failures=2)
    live.heard(PEER, 1.0)
    assert not live.ping_failed(PEER, 7.0, sent_at=2.0)
    assert live.ping_failed(PEER, 13.0, sent_at=8.0)
    assert live.excused == 0


def test_our_own_stall_excuses_a_bounded_number_of_timeouts() -> None:
    """Our process woke 3 s late while the ping waited: the answer may be unread in our socket.
    A dead peer on a node that stays starved is still closed, after twice as many failures."""
    live = Liveness(max_failures=2, stall_s=2.0)
    live.stalled(3.0, 1.5)  # a short hiccup is no excuse
    assert not live.ping_failed(PEER, 5.0, sent_at=0.0)
    live.ping_ok(PEER, 6.0)
    closes = []
    for sent in range(10, 70, 6):
        live.stalled(sent + 2.0, 3.0)
        closes.append(live.ping_failed(PEER, sent + 5.0, sent_at=float(sent)))
    # 2 excused, then 2 counted (closed); the next connection's run starts from zero again.
    assert closes == [False, False, False, True] * 2 + [False, False]
    assert live.excused == 6
    assert not live.ping_failed(PEER, 1000.0, sent_at=990.0)  # no stall then: counted
    assert live.failures[PEER] == 1


def test_a_closed_connection_forgets_that_it_was_heard() -> None:
    live = Liveness(max_failures=1)
    live.heard(PEER, 5.0)
    live.closed(PEER)
    assert live.ping_failed(PEER, 9.0, sent_at=4.0)


def test_heard_memory_is_bounded() -> None:
    live = Liveness()
    for i in range(5000):
        live.heard(f"p{i}", float(i))
    assert len(live._heard) <= 4096 and "p4999" in live._heard


def test_stall_threshold_is_validated() -> None:
    with pytest.raises(ValueError):
        Liveness(stall_s=0)


@given(st.lists(st.sampled_from(["ok", "heard", "stalled", "silent"]), max_size=80),
       st.integers(1, 5))
def test_a_peer_heard_from_is_never_closed_and_stalls_only_delay(
        pings: list[str], limit: int) -> None:
    """Whatever the sequence: a failed ping with the peer heard meanwhile never closes; a
    close needs ``limit`` counted failures; stalls delay a close by at most ``limit`` pings."""
    live = Liveness(max_failures=limit, stall_s=1.0)
    uncounted_run = counted = 0
    for i, kind in enumerate(pings):
        sent, now = 10.0 * i, 10.0 * i + 5.0
        if kind == "ok":
            live.ping_ok(PEER, now)
            uncounted_run = counted = 0
            continue
        if kind == "heard":
            live.heard(PEER, sent + 1.0)
        elif kind == "stalled":
            live.stalled(sent + 1.0, 3.0)
        closed = live.ping_failed(PEER, now, sent_at=sent)
        if kind == "heard":
            assert not closed
            uncounted_run = counted = 0
            continue
        if kind == "stalled" and uncounted_run < limit:
            assert not closed
            uncounted_run += 1
            continue
        counted += 1
        assert closed == (counted == limit)
        if closed:
            uncounted_run = counted = 0
