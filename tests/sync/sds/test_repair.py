"""SDS-R: back-offs, response groups, requests, responses and cancellation."""

from __future__ import annotations

from sync.sds import (
    Delivered,
    RepairAnswered,
    RepairRequested,
    SdsChannel,
    SdsConfig,
    decode_transmission,
    in_response_group,
    t_req,
    t_resp,
)
from sync.sds.state import encode_state
from tests.sync.sds.helpers import T0, channel, key, of_type

# Resends effectively off: only SDS-R repairs here.
# repair_linger 0: a request goes on a sync the moment it falls due (the linger has its own test).
CFG = SdsConfig(resend_interval=10_000, t_min=30, t_max=120, sync_interval=1000, repair_linger=0)


def test_t_req_is_within_t_min_t_max() -> None:
    values = [t_req(T0, "me", f"m{i}", 30, 120) - T0 for i in range(500)]
    assert all(30 <= v < 120 for v in values)
    assert max(values) - min(values) > 60  # spread over the window
    assert t_req(T0, "me", "m1", 30, 120) == t_req(T0, "me", "m1", 30, 120)
    assert t_req(T0, "other", "m1", 30, 120) != t_req(T0, "me", "m1", 30, 120)


def test_t_resp_is_zero_for_the_original_sender() -> None:
    assert t_resp(T0, "alice", "alice", "m", 120) == T0
    others = [t_resp(T0, f"p{i}", "alice", "m", 120) - T0 for i in range(200)]
    assert all(0 <= v < 120 for v in others) and len(set(others)) > 150


def test_response_groups() -> None:
    assert all(in_response_group(f"p{i}", f"p{i}", "m", 7) for i in range(50))
    members = [in_response_group(f"p{i}", "alice", "m", 4) for i in range(400)]
    assert 50 < sum(members) < 150
    assert all(in_response_group(f"p{i}", "alice", "m", 1) for i in range(10))


def _gap() -> tuple[list[SdsChannel], list[bytes], list[str]]:
    (a, b, c), wires, ids = _gap_with(CFG)
    for data in wires:
        b.receive(data, T0 + 3)
    return [a, b, c], wires, ids


def test_gap_repaired_by_original_sender_and_others_cancel() -> None:
    (a, b, c), _, ids = _gap()
    assert c.layers.repair.request_ids == {ids[1]}
    when = c.get_timer()
    assert when == t_req(T0 + 3, c.setup.participant_id, ids[1], 30, 120)
    [request] = c.handle_timer(when)
    assert of_type(c.events(), RepairRequested) == [RepairRequested((ids[1],))]
    tx = decode_transmission(request)
    assert tx.event.is_sync
    assert [r.message_id for r in tx.repair_request] == [ids[1]]
    assert tx.repair_request[0].sender_id == a.setup.participant_id
    a.receive(request, when)
    b.receive(request, when)
    assert a.layers.repair.response_ids == {ids[1]} and b.layers.repair.response_ids == {ids[1]}
    # The original sender's back-off is zero: it answers first.
    [answer] = a.handle_timer(when)
    assert of_type(a.events(), RepairAnswered) == [RepairAnswered(ids[1])]
    b.receive(answer, when + 0.1)
    assert b.layers.repair.response_ids == frozenset()
    b.handle_timer(when + 200)
    assert of_type(b.events(), RepairAnswered) == []
    c.receive(answer, when + 0.1)
    assert [e.message_id for e in of_type(c.events(), Delivered)] == ids[1:]
    assert c.layers.repair.request_ids == frozenset()


def test_a_peer_answers_when_the_sender_is_silent() -> None:
    (_, b, c), _, ids = _gap()
    when = c.get_timer()
    assert when is not None
    [request] = c.handle_timer(when)
    b.receive(request, when)
    answer_at = t_resp(when, b.setup.participant_id, channel(0).setup.participant_id, ids[1], 120)
    assert b.handle_timer(answer_at - 0.01) == []
    [answer] = b.handle_timer(answer_at)
    c.receive(answer, answer_at)
    assert ids[1] in {e.message_id for e in of_type(c.events(), Delivered)}


def test_seeing_anothers_request_backs_off_our_own() -> None:
    (_, b, c), wires, ids = _gap()
    d = channel(3, config=CFG)
    for i in (0, 2):
        d.receive(wires[i], T0 + 3)
    c_when = c.get_timer()
    assert c_when is not None
    [request] = c.handle_timer(c_when)
    d_due = d.get_timer()
    d.receive(request, c_when)
    assert d.get_timer() != d_due
    assert d.layers.repair.request_ids == {ids[1]}  # still wanted, asked later if not repaired
    assert b.layers.repair.request_ids == frozenset()


def test_repair_requests_capped_at_three_lowest_t_req() -> None:
    cfg = SdsConfig(causal_history_size=6, resend_interval=10_000, t_min=30, t_max=120,
                    repair_linger=0)
    a, c = channel(0, config=cfg), channel(2, config=cfg)
    wires = [a.send(f"a{i}".encode(), T0) for i in range(7)]
    ids = [e.message_id for e in of_type(a.events(), Delivered)]
    c.receive(wires[6], T0)  # names a0..a5, all missing
    assert c.layers.repair.request_ids == set(ids[:6])
    sent = c.handle_timer(T0 + 120)
    first = decode_transmission(sent[0]).repair_request
    by_t_req = sorted(ids[:6], key=lambda m: t_req(T0, c.setup.participant_id, m, 30, 120))
    assert [r.message_id for r in first] == by_t_req[:3]
    # a content message also carries due requests (the rest, paced a second later)
    carried = decode_transmission(c.send(b"c", T0 + 121)).repair_request
    assert [r.message_id for r in carried] == by_t_req[3:]


def test_only_the_response_group_answers() -> None:
    groups = 2
    cfg = SdsConfig(resend_interval=10_000, num_response_groups=groups, repair_linger=0)
    a = channel(0, config=cfg)
    wires = [a.send(f"a{i}".encode(), T0) for i in range(2)]
    ids = [e.message_id for e in of_type(a.events(), Delivered)]
    peers = [channel(i, config=cfg) for i in range(1, 9)]
    for p in peers:
        p.receive(wires[0], T0)
    requester = channel(20, config=cfg)
    requester.receive(wires[1], T0)
    when = t_req(T0, requester.setup.participant_id, ids[0], cfg.t_min, cfg.t_max)
    [request] = requester.handle_timer(when)
    members = set()
    for p in peers:
        p.receive(request, when)
        member = in_response_group(p.setup.participant_id, a.setup.participant_id, ids[0], groups)
        assert (p.layers.repair.response_ids == {ids[0]}) == member
        members.add(member)
    assert members == {True, False}
    a.receive(request, when)
    assert a.layers.repair.response_ids == {ids[0]}  # the sender is always in its own group


def test_retrieval_hints_travel_with_history_entries() -> None:
    a, b = channel(0, config=CFG), channel(1, config=CFG)
    first = a.send(b"a0", T0)
    [mid] = [e.message_id for e in of_type(a.events(), Delivered)]
    a.layers.history.set_hint(mid, b"recon-key")
    second = decode_transmission(a.send(b"a1", T0))
    assert second.event.causal_history[0].retrieval_hint == b"recon-key"
    b.receive(second.event.wire, T0)  # a0 missing: the hint comes with the missing entry
    missing = [e for ev in b.events() if hasattr(ev, "entries") for e in ev.entries]
    assert [(m.message_id, m.retrieval_hint) for m in missing] == [(mid, b"recon-key")]
    b.receive(first, T0)
    assert b.layers.incoming.missing_ids == frozenset()


def test_due_requests_linger_and_share_one_message() -> None:
    """``repair_linger``: a request that falls due waits for the next message we send; those
    falling due within the linger share one sync, and nothing goes out before it ends."""
    cfg = SdsConfig(causal_history_size=6, resend_interval=10_000, t_min=30, t_max=120,
                    sync_interval=1000, repair_linger=15)
    a, c = channel(0, config=cfg), channel(2, config=cfg)
    wires = [a.send(f"a{i}".encode(), T0) for i in range(7)]
    ids = [e.message_id for e in of_type(a.events(), Delivered)]
    c.receive(wires[6], T0)  # names a0..a5, all missing
    due = sorted((t_req(T0, c.setup.participant_id, m, 30, 120), m) for m in ids[:6])
    first = due[0][0]
    assert c.handle_timer(first) == []  # lingering
    together = [m for when, m in due if when <= first + 15][:3]
    [sync] = c.handle_timer(first + 15)
    tx = decode_transmission(sync)
    assert tx.event.is_sync
    assert [r.message_id for r in tx.repair_request] == together
    assert len(together) >= 1
    # Its job is the requests: it carries the small filter of unnamed ids, not the full one
    # (``bloom_small_max_request_sync``); a content message still carries the full filter.
    assert tx.bloom_params is not None and tx.bloom_filter is not None
    assert tx.bloom_params.bits < SdsConfig().bloom_capacity  # the full one has 9,593
    full = decode_transmission(c.send(b"c", first + 16))
    assert full.bloom_params is not None and full.bloom_params.bits > 9_000


LINGER_CFG = SdsConfig(resend_interval=10_000, t_min=30, t_max=120, sync_interval=1000,
                       repair_linger=15)


def _lingering() -> tuple[SdsChannel, list[str], float]:
    """c misses a1; its request fell due and lingers (nothing sent yet)."""
    (_, _, c), _, ids = _gap_with(LINGER_CFG)
    when = c.get_timer()
    assert when is not None
    assert c.handle_timer(when) == []
    return c, ids, when


def test_lingering_request_rides_on_a_content_message() -> None:
    c, ids, when = _lingering()
    carried = decode_transmission(c.send(b"c", when + 1)).repair_request
    assert [r.message_id for r in carried] == [ids[1]]
    # the linger ends: nothing left to ask for
    assert c.handle_timer(when + 15) == []


def _gap_with(cfg: SdsConfig) -> tuple[list[SdsChannel], list[bytes], list[str]]:
    a, b, c = (channel(i, config=cfg) for i in range(3))
    wires = [a.send(f"a{i}".encode(), T0 + i) for i in range(3)]
    ids = [e.message_id for e in of_type(a.events(), Delivered)]
    for i in (0, 2):  # c misses a1
        c.receive(wires[i], T0 + 3)
    return [a, b, c], wires, ids


def test_a_lingering_request_keeps_its_deadline_across_a_restart() -> None:
    """The linger's timer is not saved: a request due before a restart goes out when its
    linger ends (due + linger), not a whole linger after the restart."""
    c, ids, due = _lingering()  # until due + 15
    delivered = of_type(c.events(), Delivered)
    again = SdsChannel.restore(encode_state(c.snapshot()), key(2), config=LINGER_CFG, now=due + 5,
                               log=[(d.message_id, d.lamport, d.sender_id) for d in delivered])
    again.events()
    assert again.handle_timer(due + 5) == []
    assert again.get_timer() == due + 15
    [sync] = again.handle_timer(due + 15)
    assert [r.message_id for r in decode_transmission(sync).repair_request] == [ids[1]]
