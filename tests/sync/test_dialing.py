"""sync.dialing: whom to dial and when, on a fixed clock."""

from __future__ import annotations

from sync.dialing import MAX_BACKOFF_S, MIN_BACKOFF_S, DialSchedule, peer_id_of_addr

ME = "12D3KooWme"
A = "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWa"
B = "/ip4/127.0.0.1/tcp/4002/p2p/12D3KooWb"
T0 = 1000.0


def _never_banned(_peer: str) -> bool:
    return False


def test_peer_ids_of_addresses() -> None:
    assert peer_id_of_addr(A) == "12D3KooWa"
    assert peer_id_of_addr(A + "/") == "12D3KooWa"
    assert peer_id_of_addr("/ip4/127.0.0.1/tcp/4001") is None
    assert peer_id_of_addr("/p2p/") is None


def test_remember_ignores_ourselves_and_bad_addresses_and_updates_addresses() -> None:
    schedule = DialSchedule(ME)
    assert schedule.remember(f"/ip4/1.2.3.4/tcp/1/p2p/{ME}") is None
    assert schedule.remember("/ip4/1.2.3.4/tcp/1") is None
    peer = schedule.remember(A)
    assert peer is not None and peer.addr == A
    moved = A.replace("4001", "5001")
    assert schedule.remember(moved) is peer and peer.addr == moved
    assert list(schedule.known) == ["12D3KooWa"]
    assert schedule.forget("12D3KooWa") and not schedule.forget("12D3KooWa")


def test_failed_dials_back_off_exponentially_up_to_the_cap() -> None:
    schedule = DialSchedule(ME)
    peer = schedule.remember(A)
    assert peer is not None
    now, delays = T0, []
    for _ in range(12):
        plan = schedule.plan(now, set(), _never_banned)
        assert plan.dial == [peer]  # due exactly when its back-off expires
        delays.append(schedule.failed(peer, now))
        assert schedule.plan(now + delays[-1] - 0.01, set(), _never_banned).dial == []
        now += delays[-1]
    assert delays[:5] == [2.0, 4.0, 8.0, 16.0, 32.0]
    assert set(delays[5:]) == {MAX_BACKOFF_S}


def test_a_connection_resets_the_back_off_and_the_wake_time_follows_the_next_due() -> None:
    schedule = DialSchedule(ME)
    a, b = schedule.remember(A), schedule.remember(B)
    assert a is not None and b is not None
    for _ in range(4):
        schedule.failed(a, T0)
    schedule.failed(b, T0)  # due at T0 + 2
    plan = schedule.plan(T0, set(), _never_banned)
    assert plan.dial == [] and plan.wake_at == T0 + 2.0
    plan = schedule.plan(T0, {"12D3KooWa"}, _never_banned)  # a connected by itself
    assert a.failures == 0 and plan.wake_at == T0 + 2.0
    schedule.connected(b)
    assert b.failures == 0
    # Never sooner than the minimum, never later than the maximum wait.
    assert schedule.plan(T0 + 5, set(), _never_banned).wake_at == T0 + 5 + MIN_BACKOFF_S
    assert DialSchedule(ME).plan(T0, set(), _never_banned).wake_at == T0 + MAX_BACKOFF_S


def test_banned_peers_are_not_dialled() -> None:
    schedule = DialSchedule(ME)
    schedule.remember(A)
    b = schedule.remember(B)
    plan = schedule.plan(T0, set(), lambda peer: peer == "12D3KooWa")
    assert plan.dial == [b]
