"""The simulator: a small sweep of seeds over each kind of scenario (``make sim`` sweeps many),
determinism, and the replay command of a failing seed."""

from __future__ import annotations

import dataclasses

import pytest

from node.config.combined import sds_config
from node.config.settings import Config
from sync.sds import SdsConfig
from sync.sim import SWEEP, Scenario, SimFailure, Simulation, run
from sync.sim.__main__ import parse

SCENARIOS = SWEEP


def test_the_simulated_members_run_the_nodes_default_settings() -> None:
    assert sds_config(Config()) == SdsConfig() == Scenario().sds


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_seed_sweep(name: str, seed: int) -> None:
    sc = dataclasses.replace(SCENARIOS[name], seed=seed)
    stats = run(sc)
    assert stats.published > 100
    # Hostile members' valid events (amplify) are logged like anyone's; nothing else is.
    assert stats.messages == stats.published or (sc.hostile and stats.messages > stats.published)
    assert stats.heads_peak <= SdsConfig().max_heads
    if sc.recon:
        assert stats.replication["recon_sessions"] > 0


def test_churn_seed_31_waits_for_the_joiners_gap_to_close() -> None:
    """Churn seed 31 (on main 3f41c63) ended at the first quiet moment with a joiner lacking
    a message nobody had named to it yet; the run now goes on until a sync names it."""
    stats = run(dataclasses.replace(SCENARIOS["churn"], seed=31))
    assert stats.messages == stats.published
    assert stats.quiet_at > 18.0


def test_storm_seed_6_a_message_that_left_with_its_only_holder_is_not_required() -> None:
    """Its sender left for good before any other member got message #98 (losses, churn):
    nobody can fetch it or know it existed. Convergence is checked on every other message;
    the vanished one is counted."""
    sim = Simulation(dataclasses.replace(SWEEP["storm"], seed=6))
    stats = sim.run()
    assert stats.vanished == 1
    ids = sorted(sim.msg_no, key=sim.msg_no.__getitem__)
    vanished = [i for i in range(stats.messages)
                if not any(len(m.log) > i and m.log[i] for m in sim.members if not m.gone)]
    assert len(vanished) == 1
    holders = [m for m in sim.members if len(m.log) > vanished[0] and m.log[vanished[0]]]
    assert holders and all(m.gone for m in holders)
    assert ids[vanished[0]]  # a message that was delivered (to its sender at least)


def test_a_run_is_replayed_exactly_from_its_seed() -> None:
    sc = dataclasses.replace(SCENARIOS["loss"], seed=5, members=10)
    a, b = run(sc).summary(), run(sc).summary()
    for volatile in ("cpu_seconds", "cpu_us_per_event_member"):
        a.pop(volatile)
        b.pop(volatile)
    assert a == b


def test_a_failing_seed_prints_the_command_that_replays_it() -> None:
    sc = dataclasses.replace(SCENARIOS["churn"], seed=3, skew=0.5,
                             sds=SdsConfig(max_heads=7, repair_cooldown=10.0))
    sim = Simulation(sc)

    def broken(sim: Simulation, member: object) -> None:
        if sim.steps == 50:
            raise sim.fail("a planted violation")

    sim.on_step = broken
    with pytest.raises(SimFailure) as failure:
        sim.run()
    command = str(failure.value).split("replay: ")[1]
    assert command.startswith("python -m sync.sim ")
    replayed, _, _ = parse(command.split()[3:])
    assert replayed == sc


def test_sharing_decoding_and_signature_checks_changes_no_decision() -> None:
    """sync/sim/shared.py only saves repeated work: with and without it, the same figures."""
    sc = dataclasses.replace(SCENARIOS["hostile"], seed=6, members=10)
    a = run(sc).summary()
    b = run(dataclasses.replace(sc, shared=False)).summary()
    for volatile in ("cpu_seconds", "cpu_us_per_event_member"):
        a.pop(volatile)
        b.pop(volatile)
    assert a == b
