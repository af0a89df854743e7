"""How SDS repair, fetch-by-id and Recon divide a gap (sync.replication.GapPlanner), on a fixed
clock."""

from __future__ import annotations

import random

from sync.errors import ErrorKind, RemoteProtocolError
from sync.replication import GapPlanner, Penalize, ReconcileSoon
from sync.sds import MissingEntry

T = 500.0


def entry(mid: str, sender: str) -> MissingEntry:
    return MissingEntry(mid, None, sender)


def test_sds_has_the_grace_then_senders_first_then_recon_for_the_rest() -> None:
    g = GapPlanner(grace_s=1.0, max_ids=10, rng=random.Random(3), extra_peers=1)
    g.missing([entry("m1", "alice"), entry("m2", "bob")], T)
    assert g.get_timer() == T + 1.0
    assert g.handle_timer(T + 0.5) == []
    batch = g.handle_timer(T + 1.0)
    assert [e.message_id for e in batch] == ["m1", "m2"]
    plan = g.plan(batch, {"m1"}, ["alice", "carol", "dave"], {"dave"})
    assert plan.ids == {"m1"}  # m2 arrived meanwhile (SDS repair)
    assert plan.peers[0] == "alice" and "dave" not in plan.peers and len(plan.peers) == 2
    assert g.done(plan) == [ReconcileSoon(1)]  # nobody answered: left to Recon
    g.missing([entry("m1", "alice")], T + 2)  # queued again once done
    due = g.handle_timer(T + 3.0)
    assert [e.message_id for e in due] == ["m1"]
    again = g.plan(due, {"m1"}, ["alice"], ())
    assert again.ids == {"m1"} and again.peers == ["alice"]
    g.received(again, "m1")
    assert g.done(again) == []


def test_a_bad_fetch_answer_costs_by_its_kind() -> None:
    g = GapPlanner(grace_s=0.0, max_ids=4, rng=random.Random(0))
    err = RemoteProtocolError("more events than ids", "p", ErrorKind.UNREQUESTED)
    assert g.bad_answer("p", err) == [Penalize("p", "protocol")]
