"""The per-peer work budget (sync.workbudget) on a fixed clock, and its bounds as properties."""

from __future__ import annotations

import itertools
import random
from math import ceil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sync.errors import LocalProtocolError
from sync.recon.wire import KEYS, Limits, MessageWriter, decode_message
from sync.workbudget import (
    FIRST_FRAME_PRICE,
    HASH_UNITS,
    Admit,
    Refuse,
    Wait,
    WorkBudget,
    WorkLimits,
    fetch_units,
    recon_message_units,
    recon_units,
    want_units,
)

LIMITS = WorkLimits(peer_rate=100.0, peer_burst=1000.0, total_rate=300.0, total_burst=3000.0,
                    max_wait_s=5.0, max_peers=4)


def test_within_burst_is_admitted_at_once() -> None:
    budget = WorkBudget(LIMITS, now=0.0)
    assert budget.charge("a", 600, 0.0) == Admit(600)
    assert budget.charge("a", 400, 0.0) == Admit(400)
    assert budget.available("a", 0.0) == 0


def test_over_burst_is_slowed_to_the_peer_rate() -> None:
    budget = WorkBudget(LIMITS, now=0.0)
    assert isinstance(budget.charge("a", 1000, 0.0), Admit)
    decision = budget.charge("a", 200, 0.0)
    assert decision == Wait(200, 2.0)  # 200 units at 100/s
    # Charged: the next request queues behind it.
    assert budget.charge("a", 100, 0.0) == Wait(100, 3.0)
    assert budget.waits == 2


def test_far_over_budget_is_refused_uncharged() -> None:
    budget = WorkBudget(LIMITS, now=0.0)
    budget.charge("a", 1000, 0.0)
    refused = budget.charge("a", 600, 0.0)  # would wait 6 s > 5 s
    assert isinstance(refused, Refuse) and refused.scope == "peer"
    assert budget.available("a", 0.0) == 0  # not charged
    assert budget.refused == {"peer": 1, "total": 0}
    # The rate refills it: ten seconds later the same request goes through.
    assert isinstance(budget.charge("a", 600, 10.0), Admit)


def test_one_request_larger_than_any_budget_is_refused() -> None:
    budget = WorkBudget(LIMITS, now=0.0)
    assert LIMITS.max_units == 1500
    assert isinstance(budget.charge("a", 1501, 0.0), Refuse)


def test_many_identities_share_the_total_budget() -> None:
    budget = WorkBudget(LIMITS, now=0.0)
    decisions = [budget.charge(f"p{i}", 1000, 0.0) for i in range(4)]
    assert [type(d) for d in decisions[:3]] == [Admit, Admit, Admit]
    # The fourth fresh identity has its own burst but the node's total is spent: it waits
    # for the total rate (1000 / 300 s), and nobody is refused as over its own budget.
    assert isinstance(decisions[3], Wait)
    assert decisions[3].until == pytest.approx(1000 / 300)
    fifth = budget.charge("p4", 1000, 0.0)
    assert isinstance(fifth, Refuse) and fifth.scope == "total"
    # Asking again and again while the node is saturated spends the peer's own budget.
    again = budget.charge("p4", 1000, 0.0)
    assert isinstance(again, Refuse) and again.scope == "peer"


def test_table_is_bounded_and_keeps_debtors() -> None:
    budget = WorkBudget(LIMITS, now=0.0)
    budget.charge("debtor", 1200, 0.0)
    for i in range(10):
        budget.charge(f"fresh{i}", 1, 0.0)
    assert len(budget) <= LIMITS.max_peers
    assert budget.available("debtor", 0.0) < 0  # still remembered, still in debt


def test_costs_grow_with_size() -> None:
    assert recon_units(0) == 1
    assert recon_units(3_300_000) == 1 + 3_300_000 // 1024
    assert fetch_units(256) == want_units(256) == 513


def _message(build: str, n: int) -> tuple[int, int]:
    """(bytes, units) of a real message: ``n`` HASH ranges over short bounds (the hostile
    flood's shape), or one KEYS range of ``n`` keys of an event id's size."""
    limits = Limits()
    writer = MessageWriter(limits, ((b"", b"\xff"),))
    if build == "hash":
        bounds = [b"\x01" + i.to_bytes(3, "big") for i in range(n + 1)]
        for lo, hi in itertools.pairwise(bounds):
            assert writer.try_hash(lo, hi, 3, bytes(16))
    else:
        rng = random.Random(7)
        keys = sorted(b"\x01" + rng.randbytes(44) for _ in range(n))
        assert writer.try_keys(KEYS, b"\x01", b"\x02", keys) == n
    data = writer.finish(more=False)
    return len(data), recon_message_units(decode_message(data, limits))


def test_a_message_is_charged_by_the_work_it_asks_not_by_its_bytes() -> None:
    """Range claims cost a range hash each (12-25 µs), listed keys a lookup (~2.3 µs): per byte
    a flood of claims costs far more than an honest catch-up's key list, and is charged so."""
    hash_bytes, hash_units = _message("hash", 10_000)
    key_bytes, key_units = _message("keys", 10_000)
    assert hash_units == 1 + HASH_UNITS * 10_000
    assert key_units == 1 + (1 + 10_000) // 4  # one KEYS range and its keys
    assert hash_units / hash_bytes > 10 * key_units / key_bytes


@pytest.mark.parametrize("kwargs", [
    {"peer_rate": 0}, {"total_rate": -1}, {"max_wait_s": 0}, {"peer_burst": 0},
    {"peer_burst": 10.0, "total_burst": 5.0}, {"max_peers": 0},
])
def test_bad_limits_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(LocalProtocolError):
        WorkLimits(**kwargs)


WIDE = WorkLimits(peer_rate=100.0, peer_burst=1000.0, total_rate=300.0, total_burst=3000.0,
                  max_wait_s=5.0, max_peers=100)
requests = st.lists(
    st.tuples(st.integers(0, 5), st.integers(1, 2000), st.floats(0, 2.0)),
    min_size=1, max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(requests)
def test_granted_work_never_exceeds_the_budgets(reqs: list[tuple[int, int, float]]) -> None:
    """Whatever the peers ask and whenever: the work done by time t (a request is done at
    its admit or wait time) is within burst + rate * t, per peer and in total; no grant waits
    longer than max_wait_s; a refusal costs nothing."""
    # Room for every peer: a peer forgotten while in debt would come back with a new burst.
    budget = WorkBudget(WIDE, now=0.0)
    now = 0.0
    done: list[tuple[float, str, int]] = []
    for peer_no, units, step in reqs:
        now += step
        peer = f"p{peer_no}"
        before = budget.available(peer, now)
        decision = budget.charge(peer, units, now)
        if isinstance(decision, Refuse):
            # Refused for its own budget: not charged (for the node's total: charged).
            if decision.scope == "peer":
                assert budget.available(peer, now) == before
            continue
        at = decision.until if isinstance(decision, Wait) else now
        assert at - now <= LIMITS.max_wait_s + 1e-9
        done.append((at, peer, decision.units))
    for t, _, _ in done:
        total = sum(u for at, _, u in done if at <= t)
        assert total <= LIMITS.total_burst + LIMITS.total_rate * t + 1e-6
        for peer in {p for _, p, _ in done}:
            mine = sum(u for at, p, u in done if p == peer and at <= t)
            assert mine <= LIMITS.peer_burst + LIMITS.peer_rate * t + 1e-6


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 50), st.floats(0.5, 20.0))
def test_a_steady_peer_within_its_rate_is_never_refused(n: int, gap: float) -> None:
    """An honest peer asking for at most its rate on average is never refused nor penalised."""
    budget = WorkBudget(LIMITS, now=0.0)
    units = int(LIMITS.peer_rate * gap)
    for i in range(n):
        decision = budget.charge("honest", min(units, int(LIMITS.peer_burst)), i * gap)
        assert not isinstance(decision, Refuse)


def test_only_a_refusal_for_the_peers_own_budget_costs_it() -> None:
    from sync.workbudget import Refuse

    assert Refuse(5, "peer", 2.0).penalty == "over_budget"
    assert Refuse(5, "total", 2.0).penalty is None


def test_spent_work_is_paid_even_when_the_rest_is_refused() -> None:
    """A Recon message is decoded before its content can be priced: that charge (``spent``)
    leaves both buckets in debt even when refused, so the next request waits or is refused
    before any more work is done for it."""
    budget = WorkBudget(LIMITS, now=0.0)
    refused = budget.charge("a", 2000, 0.0, spent=True)  # more than max_units: refused
    assert isinstance(refused, Refuse) and refused.scope == "peer"
    assert budget.available("a", 0.0) == 1000 - 2000
    assert isinstance(budget.charge("a", 1, 0.0), Refuse)  # 10 s of debt > max_wait_s
    assert isinstance(budget.charge("b", 1, 0.0), Admit)  # total 3000 - 2000 - 1 left
    # Without ``spent``, a refusal for the peer's own budget takes nothing.
    fresh = WorkBudget(LIMITS, now=0.0)
    assert isinstance(fresh.charge("a", 2000, 0.0), Refuse)
    assert fresh.available("a", 0.0) == 1000


def test_a_frame_is_advanced_at_the_peers_last_price_and_settled() -> None:
    """Before it is read, a Recon frame pays its reading (1 unit per KiB) or, when more, its
    size at what the peer's last frame cost per byte (the dearest a byte can be before it has
    a price); once decoded, the rest is charged or the overpaid part given back."""
    budget = WorkBudget(LIMITS, now=0.0)
    size = 10 * 1024
    first = budget.charge_frame("a", size, 0.0)
    assert first == Admit(ceil(FIRST_FRAME_PRICE * size)) == Admit(986)  # no price learnt yet
    assert budget.settle_frame("a", size, 500, first.units, 0.0) == Admit(0)  # 475 given back
    assert budget.available("a", 0.0) == 1000 - recon_units(size) - 500
    # The next frame of the same size is advanced at that price: 511 units, 0.22 s of debt.
    second = budget.charge_frame("a", size, 0.0)
    assert second == Wait(511, 0.22)
    assert budget.settle_frame("a", size, 500, second.units, 0.0) == Admit(0)
    # A cheap frame after a dear one gets its overpaid advance back.
    third = budget.charge_frame("a", size, 10.0)
    left = budget.available("a", 10.0)
    assert budget.settle_frame("a", size, 0, third.units, 10.0) == Admit(0)
    assert budget.available("a", 10.0) == left + third.units - recon_units(size)


def test_fresh_identities_first_frames_are_paced_before_they_are_read() -> None:
    """The attack benchmark's flood opens with ten fresh identities announcing a 1.3 MB frame of
    60,000 made-up claims each, at once. Advanced at the reading's price (1 unit per KiB), all
    ten were read and decoded at once (153 ms each here). Advanced at the dearest a byte can
    be, 127,031 units each, the node's total budget (400,000, 30,000 a second) lets three be
    read now and two in 3.6 and 7.8 s, and refuses five unread (not penalised: honest peers
    may be among them)."""
    nbytes = 1_320_283
    budget = WorkBudget(WorkLimits(), now=0.0)
    decisions = [budget.charge_frame(f"id{k}", nbytes, 0.0) for k in range(10)]
    assert decisions[:3] == [Admit(127_031)] * 3
    assert [round(d.until, 1) for d in decisions[3:5] if isinstance(d, Wait)] == [3.6, 7.8]
    assert [type(d) for d in decisions[5:]] == [Refuse] * 5
    assert {d.penalty for d in decisions[5:] if isinstance(d, Refuse)} == {None}
    # The price of what the frame asks (HASH_UNITS per claim) is then about what was advanced.
    due = recon_units(nbytes) + 1 + HASH_UNITS * 60_000
    assert abs(due - 127_031) / due < 0.06
    # Read at the reading's price instead, all ten go through at once.
    cheap = WorkBudget(WorkLimits(), now=0.0)
    assert all(isinstance(cheap.charge(f"id{k}", recon_units(nbytes), 0.0), Admit)
               for k in range(10))


def test_an_honest_first_frame_gets_its_overpaid_advance_back() -> None:
    """An honest session opens with a split of the key space (a few KiB): advanced at the
    dearest price, a few hundred units, given back once decoded; its next frames pay its own
    price."""
    budget = WorkBudget(LIMITS, now=0.0)
    paid = budget.charge_frame("a", 2048, 0.0)
    assert paid == Admit(198)
    assert budget.settle_frame("a", 2048, 40, paid.units, 0.0) == Admit(0)
    assert budget.available("a", 0.0) == 1000 - recon_units(2048) - 40
    assert budget.charge_frame("a", 2048, 1.0) == Admit(recon_units(2048) + 40)


def test_retries_refused_unread_cost_the_peer_its_price() -> None:
    """The Recon flood of the attack benchmark: a peer whose first frame asked much work keeps
    sending the same frame while other identities keep the node's total budget spent. Each try
    is refused unread (scope total, not penalised), but charged to the peer at its learnt price,
    so it is refused for its own budget, and penalised, by its second try. Charged only the
    reading (1 unit per KiB), it goes on for as long as its refill outpaces its tries."""
    limits = WorkLimits(peer_rate=100.0, peer_burst=1000.0, total_rate=100.0,
                        total_burst=1000.0, max_wait_s=5.0, max_peers=4)
    size = 10 * 1024

    def tries_until_penalised(priced: bool) -> int:
        budget = WorkBudget(limits, now=0.0)
        paid = budget.charge_frame("a", size, 0.0).units
        assert isinstance(budget.settle_frame("a", size, 900, paid, 0.0), Admit)
        # Others' decoded frames (spent) put the total 9 s into debt.
        assert budget.charge("b", 1000, 0.0, spent=True) == Refuse(1000, "total", 9.11)
        for k in range(1, 1000):
            now = k * 0.05
            decision = (budget.charge_frame("a", size, now) if priced
                        else budget.charge("a", recon_units(size), now))
            assert isinstance(decision, Refuse)
            budget.charge("b", 5, now, spent=True)  # the others keep the total spent
            if decision.penalty is not None:
                return k
        return 1000

    assert tries_until_penalised(priced=True) == 1
    assert tries_until_penalised(priced=False) > 50  # 5 s of tries, 20 a second


def test_an_advance_never_refuses_a_peer_with_a_full_bucket() -> None:
    budget = WorkBudget(LIMITS, now=0.0)
    budget.settle_frame("a", 1024, 1400, budget.charge_frame("a", 1024, 0.0).units, 0.0)
    # ~1.4 units per byte on a 1 MiB frame: capped at the most one request may cost, which
    # a full bucket pays within work_max_wait_s.
    decision = budget.charge_frame("a", 1 << 20, 100.0)
    assert decision == Wait(int(LIMITS.max_units), 105.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 1 << 22), st.floats(0.0, 1.0)), max_size=30))
def test_the_advance_changes_when_a_frame_is_paid_not_how_much(
        shapes: list[tuple[int, float]]) -> None:
    """Frames cost their reading plus their answer, whatever was advanced (a frame asks at
    most ~0.05 units per byte, its HASH ranges; up to 1 is tried here)."""
    frames = [(nbytes, int(nbytes * per_byte)) for nbytes, per_byte in shapes]
    limits = WorkLimits(peer_rate=1.0, peer_burst=1e12, total_rate=1.0, total_burst=1e12,
                        max_wait_s=1.0, max_peers=4)
    budget = WorkBudget(limits, now=0.0)
    for nbytes, units in frames:
        paid = budget.charge_frame("a", nbytes, 0.0).units
        budget.settle_frame("a", nbytes, units, paid, 0.0)
    due = sum(recon_units(nbytes) + units for nbytes, units in frames)
    assert budget.available("a", 0.0) == 1e12 - due
