"""The rules behind issue 30's fixes, one by one: member estimate and response groups, head
bounds, repair budgets and the repair-request signature."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sync.sds import (
    HistoryRef,
    MemberEstimate,
    RepairRefused,
    SdsConfig,
    decode_transmission,
    response_groups,
    transmission_suffix,
)
from sync.sds.history import CausalHistory
from sync.sds.message import verify_repair
from tests.sync.sds.helpers import CHANNEL, T0, channel, key


def test_response_groups_are_n_div_128_plus_1() -> None:
    assert [response_groups(n, 128) for n in (0, 1, 127, 128, 255, 256, 1000)] == \
        [1, 1, 1, 2, 2, 3, 8]


def test_member_estimate_forgets_the_silent_and_is_bounded() -> None:
    est = MemberEstimate(window=60.0, cap=3)
    for i, sender in enumerate("abcd"):
        est.heard(sender, T0 + i)
    assert est.count(T0 + 4) == 3  # capped: the least recently heard dropped
    assert est.count(T0 + 62.5) == 1  # only "d" heard within the window
    est.external = 500
    assert est.count(T0 + 63) == 500


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.lists(st.integers(0, 400), max_size=3)),
                min_size=1, max_size=400))
def test_heads_never_exceed_their_bound(steps: list[tuple[int, list[int]]]) -> None:
    history = CausalHistory(tail_size=64, max_heads=8, head_ttl=5.0, max_hints=100)
    for n, (lamport, named) in enumerate(steps):
        history.logged(f"m{n}", T0_MS + lamport, "s", [f"m{k}" for k in named], head=True)
        assert len(history.heads) <= 8
        chosen = history.choose(2, (T0_MS + lamport) / 1000)
        assert len(chosen) <= 2
    assert history.heads_peak <= 8


T0_MS = int(T0 * 1000)


def test_a_content_message_names_the_oldest_head_in_its_last_slot() -> None:
    history = CausalHistory(tail_size=64, max_heads=64, head_ttl=600.0, max_hints=100)
    for n in range(5):
        history.logged(f"m{n}", T0_MS + n, "s", [], head=True)
    chosen = [r.message_id for r in history.choose(2, T0 + 1)]
    assert chosen == ["m0", "m4"]


def test_repair_requests_are_signed_and_bound_to_their_message() -> None:
    ch = channel(1)
    ch.send(b"x", T0)
    refs = (HistoryRef("ab" * 32, None, None),)
    mid = ch.events()[-1].message_id  # type: ignore[attr-defined]
    suffix = transmission_suffix(None, None, refs, channel_id=CHANNEL, signing_key=key(1),
                                 message_id=mid)
    tx = decode_transmission(ch.send(b"y", T0 + 1) + suffix)
    assert tx.repair_signature is not None
    sender = ch.setup.participant_id
    assert not verify_repair(sender, CHANNEL, tx.event.message_id, refs, tx.repair_signature)
    assert verify_repair(sender, CHANNEL, mid, refs, tx.repair_signature)


def test_an_over_budget_requester_is_reported_for_a_penalty() -> None:
    victim = channel(0, config=SdsConfig(max_resends=0, repair_requester_bytes=10_000,
                                         repair_total_bytes=10_000))
    ids = []
    for i in range(5):
        victim.send(bytes([i]) * 4000, T0 + i)
        ids.append(victim.events()[-1].message_id)  # type: ignore[attr-defined]
    asker = channel(3)
    body = asker.send(b"asking", T0 + 10)
    mid = asker.events()[-1].message_id  # type: ignore[attr-defined]
    refs = tuple(HistoryRef(i, None, victim.setup.participant_id) for i in ids)
    victim.receive(body + transmission_suffix(None, None, refs, channel_id=CHANNEL,
                                              signing_key=key(3), message_id=mid), T0 + 11)
    refused = [e for e in victim.events() if isinstance(e, RepairRefused)]
    assert refused and refused[0].requester == asker.setup.participant_id
    assert len(refused[0].message_ids) == 3  # 2 x 4 KB fit in 10 KB, 3 do not
    assert victim.layers.repair.refusals["requester"] == 3


def test_a_replayed_request_costs_at_most_one_answer_per_cooldown_then_nothing() -> None:
    victim = channel(0, config=SdsConfig(max_resends=0, repair_requester_bytes=10_000))
    victim.send(b"z" * 4000, T0)
    target = victim.events()[-1].message_id  # type: ignore[attr-defined]
    asker = channel(3)
    body = asker.send(b"asking", T0 + 10)
    mid = asker.events()[-1].message_id  # type: ignore[attr-defined]
    wire = body + transmission_suffix(None, None, (HistoryRef(target),), channel_id=CHANNEL,
                                      signing_key=key(3), message_id=mid)
    answers = 0
    for n in range(40):  # replayed every 5 s for 200 s
        victim.receive(wire, T0 + 11 + 5 * n)
        answers += sum(1 for d in victim.handle_timer(T0 + 11 + 5 * n + 0.01) if len(d) > 4000)
    # Fresh for t_min (30 s): one answer, then the cooldown; after that, stale.
    assert answers == 1
    assert victim.layers.stats.repair_stale_ignored > 30
    assert not [e for e in victim.events() if isinstance(e, RepairRefused)]


def test_a_history_naming_our_message_twice_acknowledges_it_once() -> None:
    """Found by the simulator: a history with a duplicate id (a hostile sender's) made
    ``receive`` raise KeyError (on b4adb7a too): peer input must never raise but
    ``RemoteProtocolError``."""
    from sync.identity import peer_id_of
    from sync.sds import Acknowledged, encode_event

    ours = channel(0)
    ours.send(b"ours", T0)
    mid = ours.events()[-1].message_id  # type: ignore[attr-defined]
    ref = HistoryRef(mid, None, ours.setup.participant_id)
    hostile = encode_event(CHANNEL, peer_id_of(key(4)), int(T0 * 1000) + 5, (ref, ref),
                           b"twice", key(4))
    ours.receive(hostile.wire, T0 + 1)
    assert [e.message_id for e in ours.events() if isinstance(e, Acknowledged)] == [mid]


def test_a_received_sync_moves_the_heads_it_names_to_the_back_of_our_rotation() -> None:
    """Issue 30 (seed 1, N=100, 5% loss): every member's sync named the same oldest heads, so
    a head beyond them stayed unnamed while the group was quiet. A sync we receive now moves
    the heads it names behind ours: our next sync names the others."""
    history = CausalHistory(64, 64, 300.0, 1000)
    refs = [HistoryRef(f"m{i:02d}", None, "s") for i in range(20)]
    for i, ref in enumerate(refs):
        history.logged(ref.message_id, i, "s", (), head=True)
    history.named_by_others([r.message_id for r in refs[:16]])
    chosen = {r.message_id for r in history.choose(16, T0, rotate=True)}
    assert {r.message_id for r in refs[16:]} <= chosen


def test_seed_1_at_100_members_with_loss_converges() -> None:
    """The scale benchmark's failing seed (docs/sds.md 4b): one member never learned that it
    lacked a message, because no sync named that head for 900 s. ~20 s of CPU."""
    from sync.sim import run
    from sync.sim.__main__ import parse

    scenario = parse(["--members", "100", "--seed", "1", "--duration", "20",
                      "--loss", "0.05"])[0]
    stats = run(scenario)
    assert stats.members == 100 and stats.messages > 300
