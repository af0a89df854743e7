"""What a truncated Recon session leaves, cut into ranges: a catch-up lists each missing key
about once, instead of once per session."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.recon import MemoryKeyStore, ReconConfig, ReconSession
from sync.transfer import RangeBacklog, ReconExchange
from tests.sync.recon.helpers import FULL
from tests.sync.transfer.test_exchange import run

CONFIG = ReconConfig()


def test_truncated_session_is_cut_at_the_dropped_keys() -> None:
    backlog = RangeBacklog()
    backlog.finished(None, FULL, truncated=True, lowest_dropped=b"\x10",
                     cuts=[b"\x80", b"\x40", b"\x10", b"\x40"])
    assert len(backlog) == 3
    interests, scope = backlog.take(FULL)
    assert scope == (b"\x10", b"\x40") and interests == ((b"\x10", b"\x40"),)
    backlog.give_back(scope)  # its session failed: first again
    assert backlog.take(FULL)[1] == (b"\x10", b"\x40")
    # A range session truncated again: what it left goes before the other ranges.
    backlog.finished((b"\x10", b"\x40"), FULL, truncated=True, lowest_dropped=b"\x20",
                     cuts=[b"\x30", b"\x50"])
    assert [backlog.take(FULL)[1] for _ in range(4)] == [
        (b"\x20", b"\x30"), (b"\x30", b"\x40"), (b"\x40", b"\x80"), (b"\x80", FULL[0][1])]
    assert backlog.take(FULL) == (FULL, None)


def test_not_truncated_or_outside_interests_leaves_nothing() -> None:
    backlog = RangeBacklog(max_ranges=2)
    backlog.finished(None, FULL, truncated=False, lowest_dropped=None, cuts=[])
    assert len(backlog) == 0
    backlog.finished(None, FULL, truncated=True, lowest_dropped=b"\x01",
                     cuts=[bytes([i]) for i in range(2, 50)])
    assert len(backlog) == 2  # bounded: the regular rounds cover the rest
    # A range outside the session's interests is skipped.
    assert backlog.take(((b"\x60", b"\x70"),)) == (((b"\x60", b"\x70"),), None)
    with pytest.raises(ValueError):
        RangeBacklog(max_ranges=0)


def test_exchange_samples_one_cut_per_sessions_worth() -> None:
    theirs = [i.to_bytes(2, "big") for i in range(0, 1000, 2)]
    a = ReconExchange(ReconSession.initiator(MemoryKeyStore(), FULL, CONFIG), 100, "b")
    b = ReconExchange(ReconSession.responder(MemoryKeyStore.from_sorted(theirs), FULL, CONFIG),
                      100, "a")
    run(a, b)
    assert a.truncated and len(a.missing) == 100 and a.dropped == 400
    assert len(a.cuts) == 4 and a.lowest_dropped == min(set(theirs) - set(a.missing))


def catch_up(ours: set[bytes], theirs: set[bytes], max_missing: int,
             backlog: RangeBacklog | None) -> tuple[int, int, set[bytes]]:
    """Sessions until a full one finds nothing missing, fetching what each kept:
    (sessions, keys listed as missing over all of them, the keys held at the end)."""
    have = MemoryKeyStore.from_sorted(sorted(ours))
    peer = MemoryKeyStore.from_sorted(sorted(theirs))
    sessions = listed = 0
    while True:
        interests, scope = backlog.take(FULL) if backlog else (FULL, None)
        a = ReconExchange(ReconSession.initiator(have, interests, CONFIG), max_missing, "b",
                          scope=scope)
        b = ReconExchange(ReconSession.responder(peer, FULL, CONFIG), max_missing, "a")
        run(a, b)
        sessions += 1
        listed += len(a.missing) + a.dropped
        for key in a.missing:
            have.insert(key)
        if backlog is not None:
            backlog.finished(scope, FULL, truncated=a.truncated,
                             lowest_dropped=a.lowest_dropped, cuts=a.cuts)
        if scope is None and not a.missing:
            return sessions, listed, set(have.keys(FULL[0][0], FULL[0][1], 1 << 30))
        assert sessions < 1000


def test_catch_up_lists_each_key_about_once() -> None:
    rng = random.Random(1)
    theirs = {rng.randbytes(8) for _ in range(20_000)}
    plain = catch_up(set(), theirs, 1000, None)
    ranged = catch_up(set(), theirs, 1000, RangeBacklog())
    # Without ranges every session lists what is still missing: ~N^2 / (2 max) keys (here
    # 210,000). With them the first session lists everything once and each range session
    # its own part (39,000), in as many sessions.
    assert plain[1] > 8 * len(theirs)
    assert ranged[1] < 2.5 * len(theirs)
    assert ranged[0] <= plain[0] + 2


@settings(max_examples=40, deadline=None)
@given(st.sets(st.binary(min_size=1, max_size=3), max_size=300),
       st.sets(st.binary(min_size=1, max_size=3), max_size=300), st.integers(1, 50))
def test_range_sessions_converge(ours: set[bytes], theirs: set[bytes], max_missing: int) -> None:
    """Whatever the sets and the bound: the sessions end with every key of the peer held."""
    backlog = RangeBacklog()
    assert catch_up(ours, theirs, max_missing, backlog)[2] == ours | theirs
    assert len(backlog) == 0
