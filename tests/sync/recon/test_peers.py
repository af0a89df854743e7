"""Recon peer scheduling, sans-IO, on a fixed clock and a seeded generator: the round timer,
weighted peer choice, back-off, the bounded state table and the one-session-per-pair rule."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sync.recon import PeerScheduler, channel_bounds, node_interests, sender_bounds

OURS = [(b"\x10", b"\x20"), (b"\x30", b"\x40")]


def scheduler(seed: int = 1, **kw: float) -> PeerScheduler:
    args = {"interval_s": 10.0, "min_round_s": 1.0, **kw}
    return PeerScheduler("me", OURS, random.Random(seed), **args)  # type: ignore[arg-type]


def no_latency(_peer: str) -> float | None:
    return None


def test_first_round_at_once_then_min_round_when_poked() -> None:
    s = scheduler()
    assert s.get_timer() == 0.0
    assert s.handle_timer(100.0, ["a"], no_latency) == "a"
    idle = s.get_timer()
    # Not poked: the next round after min_round_s + interval * [0.5, 1).
    assert 100.0 + 1.0 + 5.0 <= idle < 100.0 + 1.0 + 10.0
    assert s.handle_timer(idle - 0.001, ["a"], no_latency) is None
    s.poke()
    assert s.get_timer() == 101.0  # poked: as soon as min_round_s allows
    assert s.handle_timer(100.5, ["a"], no_latency) is None
    assert s.handle_timer(101.0, ["a"], no_latency) == "a"
    assert s.get_timer() > 102.0


def test_idle_rounds_are_spread_by_the_generator() -> None:
    waits = set()
    for seed in range(20):
        s = scheduler(seed)
        s.handle_timer(0.0, [], no_latency)
        waits.add(round(s.get_timer(), 6))
    assert len(waits) == 20 and all(6.0 <= w < 11.0 for w in waits)


def test_same_seed_same_choices() -> None:
    peers = [f"p{i}" for i in range(8)]
    runs = []
    for _ in range(2):
        s = scheduler(seed=7)
        runs.append([s.choose(float(t), peers, no_latency) for t in range(50)])
    assert runs[0] == runs[1] and len(set(runs[0])) > 3


def test_choice_weighted_by_latency_and_overlap() -> None:
    s = scheduler(seed=3)
    latency = {"near": 0.001, "far": 0.99, "half": None, "zero": 0.0}
    # "half" shares one of our two ranges, the others both (when known).
    s.state("half").interests = ((b"\x10", b"\x18"),)
    s.state("none").interests = ((b"\x50", b"\x60"),)
    picks = Counter(s.choose(0.0, ["near", "far", "half", "none", "zero"], latency.get)
                    for _ in range(4000))
    assert picks["none"] == 0  # shares nothing: never chosen
    # weights: near 1/0.011 = 91, half 0.5/0.06 = 8.3, zero (unmeasured, as unknown)
    # 1/0.06 = 16.7, far 1/1.0 = 1
    assert picks["near"] > 4 * picks["zero"] > 0
    assert picks["zero"] > 1.5 * picks["half"] > 0
    assert picks["half"] > 3 * picks["far"] > 0


def test_backoff_doubles_caps_and_resets() -> None:
    s = scheduler(max_backoff_s=20.0)
    assert [s.failed("a", 0.0) for _ in range(6)] == [2.0, 4.0, 8.0, 16.0, 20.0, 20.0]
    assert s.choose(19.9, ["a"], no_latency) is None  # backed off
    assert s.choose(20.0, ["a"], no_latency) == "a"
    s.succeeded("a")
    assert s.state("a").failures == 0 and s.state("a").sessions == 1
    assert s.failed("a", 30.0) == 2.0


def test_disconnect_forgets_only_what_is_not_backed_off() -> None:
    s = scheduler()
    s.connected("a", ["a"], 0.0)
    s.connected("b", ["a", "b"], 0.0)
    s.failed("b", 0.0)
    s.disconnected("a", 1.0)
    s.disconnected("b", 1.0)
    assert set(s.peers) == {"b"}
    s.disconnected("b", 2.0)
    assert not s.peers


def test_connection_pokes() -> None:
    s = scheduler()
    s.handle_timer(0.0, [], no_latency)
    assert s.get_timer() > 5.0
    s.connected("a", ["a"], 0.5)
    # A prompt session with the new peer at once, and the round poked.
    assert s.get_timer() == 0.5
    assert s.due_prompts(0.5) == ["a"]
    assert s.get_timer() == 1.0


def test_state_table_is_bounded_connected_and_backed_off_kept() -> None:
    s = scheduler(max_states=4)
    s.failed("banned", 0.0)
    for peer in ("c1", "gone1", "gone2"):
        s.state(peer)
    s.state("new", connected=["c1"], now=1.0)
    assert set(s.peers) == {"banned", "c1", "new"}
    for i in range(10):
        s.state(f"x{i}", connected=[f"x{j}" for j in range(10)], now=1.0)
    assert len(s.peers) <= 4


def test_one_session_per_pair() -> None:
    s = scheduler(max_sessions=3)
    assert s.begin_initiator("a")
    assert not s.begin_initiator("a")
    assert s.choose(0.0, ["a"], no_latency) is None  # in session: not chosen
    # A simultaneous session from "a": our id "me" < "a"? no: "a" < "me", so theirs goes on.
    assert s.begin_responder("a")
    assert not s.begin_responder("a")  # a second one from the same peer
    s.end("a", initiator=False)
    s.end("a", initiator=True)
    # "zz" > "me": when both start at once, ours goes on and theirs is declined.
    assert s.begin_initiator("zz") and not s.begin_responder("zz")
    assert s.begin_responder("b") and s.begin_responder("c")
    assert not s.begin_responder("d")  # max_sessions reached
    s.end("b", initiator=False)
    assert s.begin_responder("d")


@given(st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8))
def test_simultaneous_start_leaves_exactly_one_session(x: str, y: str) -> None:
    if x == y:
        return
    a = PeerScheduler(x, OURS, random.Random(0), interval_s=1.0, min_round_s=1.0)
    b = PeerScheduler(y, OURS, random.Random(0), interval_s=1.0, min_round_s=1.0)
    assert a.begin_initiator(y) and b.begin_initiator(x)
    # Each side's responder decides on the other's session: exactly one goes on.
    assert [b.begin_responder(x), a.begin_responder(y)].count(True) == 1


def test_node_interests_open_and_closed_group() -> None:
    assert node_interests(7, ["c2", "c1"]) == sorted(
        [channel_bounds(7, "c1"), channel_bounds(7, "c2")])
    closed = node_interests(7, ["c1"], {"m1", "me"})
    assert closed == sorted([sender_bounds(7, "c1", "m1"), sender_bounds(7, "c1", "me")])


def test_bad_settings_refused() -> None:
    with pytest.raises(ValueError):
        scheduler(interval_s=0.0)
