"""The simulator and the node drive the same replication core: the node's one driver
(``node.replication.driver.ReplicationDriver``) is built on ``sync.replication``'s
``ReplicationCore`` (a ``ReconLifecycle`` and a ``GapPlanner`` behind one timer), on the node's
default settings, and a simulated run drives that very class, on the same settings, through
its timer, sessions (their frames and reads included) and fetches; its sessions
run over the node's Recon key store (``SummaryKeyStore``), whose reads the simulator answers
from each member's key log as the node's Recon worker answers them from the events table."""

from __future__ import annotations

import dataclasses
import random
import re
import typing
from pathlib import Path

from node.config.combined import recon_config
from node.config.settings import Config
from node.replication.driver import ReplicationDriver
from node.replication.fetch import gap_planner
from node.replication.recon import recon_interests, recon_lifecycle
from node.replication.recon_work import KeyStoreWork
from sync.recon import SummaryKeyStore
from sync.replication import ChannelSet, ReplicationCore
from sync.sim import SWEEP, Simulation

SIM = Path(__file__).resolve().parents[3] / "sync" / "sim"
#: A channel's inputs and reports, called on the channel itself rather than through the core.
DIRECT = re.compile(r"\.channel\.(receive|send|handle_timer|delivered_read|events)\(")


def test_the_node_driver_and_the_simulator_run_the_same_cores() -> None:
    assert typing.get_type_hints(ReplicationDriver)["core"] is ReplicationCore
    assert typing.get_type_hints(ReplicationCore.__init__)["channels"] is ChannelSet

    config = Config()
    rng = random.Random(1)
    node_core = recon_lifecycle("me", recon_interests(1, ["general"], "me", None),
                                config.recon, rng)
    node_gaps = gap_planner(config.fetch, rng)

    scenario = dataclasses.replace(SWEEP["recon"], seed=1)
    assert scenario.recon and scenario.fetch
    sim = Simulation(scenario)
    stats = sim.run()
    assert stats.replication["recon_sessions"] > 0
    assert stats.replication["fetch_requests"] > 0  # fetches the core's timer made due
    assert sum(state.keys.store.reads for state in sim.repl.state) > 0  # reads it asked for
    assert typing.get_type_hints(KeyStoreWork.__init__)["keys"] is SummaryKeyStore
    for member, state in zip(sim.members, sim.repl.state, strict=True):
        assert type(state.core) is ReplicationCore
        # The member's channel is the one its core holds, restarts included.
        assert state.core.channels.channels == {sim.channel: member.channel}
        assert state.core.channels[sim.channel] is member.channel
        # Its sessions' frames and reads went in through the core, on the member's key store,
        # and every session it began has ended (none left held by the core).
        assert state.core.setup.keys is state.keys.store
        assert state.core.setup.config == recon_config(config)  # the node's Recon settings
        assert state.core.setup.max_missing_keys == config.recon.max_missing_keys
        assert state.core.sessions_open() == 0
        core, gaps = state.core.sessions, state.core.gaps
        assert type(core) is type(node_core) and type(gaps) is type(node_gaps)
        assert type(state.keys.store) is SummaryKeyStore
        # The node's defaults, but for the scenario's own round interval.
        assert core.config == dataclasses.replace(
            node_core.config, interval_s=scenario.recon_interval)
        assert gaps.queue.max_ids == node_gaps.queue.max_ids
        assert gaps.extra_peers == node_gaps.extra_peers


def test_the_simulator_feeds_its_channels_only_through_the_core() -> None:
    """Every send, receive, timer and report of a member's channel goes through its core's
    ``ChannelSet`` (``Simulation.channels``), as the node's driver does: no module of the
    simulator steps a channel directly."""
    direct = [f"{path.name}:{n}" for path in sorted(SIM.glob("*.py"))
              for n, line in enumerate(path.read_text().splitlines(), 1) if DIRECT.search(line)]
    assert direct == []
