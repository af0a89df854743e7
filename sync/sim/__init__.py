"""A deterministic, sans-IO simulator of large SDS groups (docs/sim.md): N members each
running a real ``SdsChannel`` over a seeded GossipSub-like mesh."""

from __future__ import annotations

from sync.sim.network import Flood, Mesh, NetworkConfig
from sync.sim.runner import Member, SimFailure, Simulation, run
from sync.sim.scenario import SWEEP, Scenario
from sync.sim.stats import Stats

__all__ = ["SWEEP", "Flood", "Member", "Mesh", "NetworkConfig", "Scenario", "SimFailure",
           "Simulation", "Stats", "run"]
