"""Fetch-by-id in the simulator (sync/sim/fetch.py): the node's settings and core, every byte
counted at both ends, the division of work with SDS-R, and hostile answers."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import node.replication.fetch as node_fetch
import node.replication.verify as node_verify
import sync.sim.fetch as sim_fetch
import sync.sim.replication as sim_replication
from sync.sds import SdsConfig
from sync.sim import NetworkConfig, Scenario, run

LOSSY = Scenario(members=30, duration=5, seed=3, network=NetworkConfig(delivery_loss=0.05))
NODE = dataclasses.replace(LOSSY, fetch=True, recon=True)


def test_the_simulated_fetch_runs_the_nodes_settings() -> None:
    assert Scenario().fetch_delay == node_fetch.GRACE_S
    assert sim_replication._FETCH_MAX_IDS == node_fetch.MAX_IDS
    assert sim_replication._FETCH_PEERS == node_fetch.PEERS_PER_ID
    assert sim_fetch.MAX_EVENT_BYTES == node_verify.MAX_EVENT_BYTES
    # SDS-R asks only after fetch-by-id had its chance (docs/replication.md "Closing gaps").
    assert SdsConfig().t_min > 10 * node_fetch.GRACE_S


def test_every_byte_is_counted_at_both_ends_and_by_kind() -> None:
    stats = run(NODE)
    assert stats.messages == stats.published > 50
    sent, received = sum(stats.bytes_sent.values()), sum(stats.bytes_received.values())
    assert sent == received > 0
    assert sum(stats.msgs_sent.values()) == sum(stats.msgs_received.values())
    assert sum(stats.recv_bytes.values()) == received
    for kind in ("content", "fetch_request", "fetch_answer", "recon"):
        assert stats.recv_bytes.get(kind, 0) > 0, kind
    r = stats.replication
    assert r["fetch_requests"] > 0 and r["fetch_answered"] > 0


def test_fetch_by_id_closes_gaps_before_sds_r_asks() -> None:
    """As the node runs (fetch-by-id 1 s after a gap, SDS-R's requests after 30-120 s), SDS-R
    is a fallback: almost no repair floods, delivery within seconds, fewer bytes than SDS-R
    alone on the same run."""
    node = run(NODE).summary()
    alone = run(LOSSY).summary()
    assert float(node["requests_per_loss"]) <= 0.02  # type: ignore[arg-type]
    assert float(alone["requests_per_loss"]) > 0.3  # type: ignore[arg-type]
    assert float(node["delivery_p99_s"]) < 5.0 < float(alone["delivery_p99_s"])  # type: ignore[arg-type]
    assert (float(node["bytes_recv_per_member_event"])  # type: ignore[arg-type]
            < 0.8 * float(alone["bytes_recv_per_member_event"]))  # type: ignore[arg-type]


HOSTILE = Scenario(members=14, duration=6, recon=True, fetch=True,
                   network=NetworkConfig(delivery_loss=0.1))


def test_forged_fetch_answers_are_refused_counted_and_charged() -> None:
    # Seed 3: the forger is asked four times (a peer is asked only for what the ones before it
    # lacked), two forged copies and two answers with a frame too many.
    stats = run(dataclasses.replace(HOSTILE, seed=3, hostile=("junk",)))
    assert stats.messages == stats.published
    r = stats.replication
    assert r["fetch_bad_answers"] > 0  # more frames than ids asked: FetchReader
    assert r.get("penalty_protocol", 0) >= r["fetch_bad_answers"]
    assert stats.rejected.get("bad signature", 0) > 0  # forged copies: verification refuses
    assert r.get("penalty_invalid_event", 0) == stats.rejected["bad signature"]


def test_a_fetch_peer_that_withholds_is_passed_over() -> None:
    # Fetch-by-id alone (Recon off): what the withholder does not answer, the next peer does.
    stats = run(dataclasses.replace(HOSTILE, seed=2, hostile=("withhold",), recon=False))
    assert stats.messages == stats.published
    assert stats.replication["fetch_answered"] > 0


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(members=st.integers(5, 12), seed=st.integers(0, 1 << 30),
       loss=st.sampled_from([0.05, 0.15]), recon=st.booleans(),
       hostile=st.sampled_from([("junk",), ("withhold",), ("junk", "withhold")]))
def test_hostile_fetch_answers_never_stop_convergence(
        members: int, seed: int, loss: float, recon: bool, hostile: tuple[str, ...]) -> None:
    """Forged or withheld fetch answers, with or without Recon: every honest member ends with
    every message (the invariants hold at every step: honest input never refused, nothing
    acknowledged lost). With Recon a gap also prompts a session with its senders at once (the
    core's rule, as in the node), which often closes it before its fetch is due."""
    stats = run(Scenario(members=members, seed=seed, rate=10.0, duration=4.0, fetch=True,
                         recon=recon, hostile=hostile,
                         network=NetworkConfig(delivery_loss=loss)))
    assert stats.messages == stats.published > 0
    r = stats.replication
    assert r["recon_sessions"] > 0 if recon else r["fetch_requests"] > 0
