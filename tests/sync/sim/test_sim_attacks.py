"""The simulator with Recon, fetch-by-id and hostile members: whole-group convergence as a
property over random small groups, and each invariant shown to catch the fault it is for
(a core with the rule switched off fails the run; the real core passes the same run)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sync.sds.acks as sds_acks
import sync.sds.channel as sds_channel
from sync.sds import SdsConfig
from sync.sds.bloom import BloomView
from sync.sds.repair_budget import RepairBudget
from sync.sim import NetworkConfig, Scenario, SimFailure, run
from sync.sim.__main__ import parse


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(members=st.integers(3, 10), seed=st.integers(0, 1 << 30),
       loss=st.sampled_from([0.0, 0.03, 0.1]), link_loss=st.sampled_from([0.0, 0.05]),
       cut=st.one_of(st.none(), st.tuples(st.floats(0.5, 3.0), st.floats(0.5, 4.0),
                                          st.floats(0.1, 0.6))),
       crash=st.sampled_from([0.0, 0.2]), join=st.sampled_from([0.0, 0.2]),
       skew=st.sampled_from([0.0, 3.0]))
def test_honest_members_converge_to_identical_logs(
        members: int, seed: int, loss: float, link_loss: float,
        cut: tuple[float, float, float] | None, crash: float, join: float,
        skew: float) -> None:
    """Whatever the losses, partition, churn and skew: after settling every honest member
    holds every message (nothing declared lost may stay lost: Recon brings it)."""
    partitions = ((cut[0], cut[0] + cut[1], cut[2]),) if cut else ()
    sc = Scenario(members=members, seed=seed, rate=10.0, duration=4.0, recon=True,
                  fetch=True, partitions=partitions, crash_rate=crash, join_rate=join,
                  downtime=3.0, skew=skew,
                  network=NetworkConfig(delivery_loss=loss, link_loss=link_loss))
    stats = run(sc)
    assert stats.messages == stats.published > 0
    assert stats.quiet_at > 0


HOSTILE = Scenario(members=14, duration=6, recon=True, fetch=True,
                   network=NetworkConfig(delivery_loss=0.03))


def test_poisoned_clocks_are_refused_and_honest_clocks_stay_bounded() -> None:
    stats = run(dataclasses.replace(HOSTILE, seed=1, hostile=("clock",)))
    assert stats.rejected.get("lamport too far ahead", 0) > 0
    assert stats.rejected.get("lamport out of range", 0) > 0


def test_without_the_clock_rule_the_clock_invariant_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sds_channel, "check_lamport", lambda *a, **k: None)
    with pytest.raises(SimFailure, match="Lamport clock"):
        run(dataclasses.replace(HOSTILE, seed=1, hostile=("clock",)))


# A small repair budget, so that the invariant's bound is within reach of the attack.
TIGHT = SdsConfig(repair_requester_bytes=600, repair_total_bytes=1000)


def test_repair_amplification_stays_within_the_budget() -> None:
    stats = run(dataclasses.replace(HOSTILE, seed=2, duration=10, hostile=("amplify",), sds=TIGHT))
    assert stats.hostile_bytes > 0 and stats.repair_refused > 0


def test_without_repair_budgets_the_budget_invariant_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RepairBudget, "admit", lambda self, r, size, now: True)
    monkeypatch.setattr(RepairBudget, "cooling", lambda self, mid, now: False)
    monkeypatch.setattr(RepairBudget, "spend", lambda self, mid, size, now: True)
    with pytest.raises(SimFailure, match="bytes of repairs"):
        run(dataclasses.replace(HOSTILE, seed=2, duration=10, hostile=("amplify",), sds=TIGHT))


def test_forged_acknowledgements_lose_nothing() -> None:
    stats = run(dataclasses.replace(HOSTILE, seed=3, hostile=("acks",)))
    assert stats.hostile_messages > 0 and stats.messages == stats.published


def test_if_unsigned_filters_counted_the_ack_invariant_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Trust every filter as signed and exact, and want one: the forger's full filters then
    acknowledge messages nobody honest holds yet, which the invariant catches."""
    monkeypatch.setattr(sds_acks.FilterEvidence, "signed_by", lambda self, s, c: True)
    monkeypatch.setattr(BloomView, "false_positive_rate", property(lambda self: 0.0))
    with pytest.raises(SimFailure, match="acknowledged while no other honest member"):
        run(dataclasses.replace(HOSTILE, seed=3, hostile=("acks",), rate=40.0,
                                sds=SdsConfig(ack_min_filters=1)))


def test_withheld_keys_are_fetched_elsewhere() -> None:
    # Recon alone (fetch by id closes most gaps before a session would find them), as the
    # node's ReconLifecycle rules it: withheld keys go back to the pool and cost the peer
    # ``short_answer`` (the session itself ends normally).
    stats = run(dataclasses.replace(HOSTILE, seed=4, hostile=("withhold",), fetch=False,
                                    network=NetworkConfig(delivery_loss=0.1)))
    r = stats.replication
    assert r["withheld"] > 0 and r["short_answer_penalties"] > 0
    assert stats.messages == stats.published


def test_a_hostile_run_is_replayed_from_its_command() -> None:
    sc = dataclasses.replace(HOSTILE, seed=9, hostile=("clock", "withhold"),
                             recon_interval=4.0, partitions=((1.0, 2.0, 0.5),))
    replayed, _, _ = parse(sc.command().split()[3:])
    assert replayed == sc
    a, b = run(sc).summary(), run(replayed).summary()
    for volatile in ("cpu_seconds", "cpu_us_per_event_member"):
        a.pop(volatile)
        b.pop(volatile)
    assert a == b
