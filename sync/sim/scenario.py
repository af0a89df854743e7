"""What one simulation run does: group size, traffic, network, churn, partitions, clocks.

Every field is plain data, so a run is replayed exactly from its scenario and seed
(``Scenario.command()`` prints the command line that does it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from sync.replication import FETCH_GRACE_S
from sync.sds import SdsConfig
from sync.sim.network import NetworkConfig

__all__ = ["SWEEP", "Scenario"]


@dataclass(frozen=True)
class Scenario:
    members: int = 10
    seed: int = 0
    #: Content messages per second, group-wide (Poisson), for ``duration`` seconds ...
    rate: float = 20.0
    duration: float = 30.0
    content_bytes: int = 100
    #: ... then at most ``settle`` more seconds until every honest member is quiet.
    settle: float = 900.0
    network: NetworkConfig = field(default_factory=NetworkConfig)
    #: Crash-and-restart, leave and join events per second, group-wide, while publishing;
    #: a crashed member is down for ``downtime`` seconds.
    crash_rate: float = 0.0
    leave_rate: float = 0.0
    join_rate: float = 0.0
    downtime: float = 20.0
    #: (start, end, fraction): from start to end a random ``fraction`` of the members is cut
    #: off from the others.
    partitions: tuple[tuple[float, float, float], ...] = ()
    #: Each member's clock is off by a uniform amount in [-skew, +skew] seconds.
    skew: float = 0.0
    #: The SDS settings of every member (default: the node's, signed messages).
    sds: SdsConfig = field(default_factory=SdsConfig)
    signed: bool = True
    #: Whether a member may end without a message it declared lost (``DependencyLost``: SDS
    #: gave up after ``lost_timeout``; the node's Recon fetches it, not modelled here). A gap
    #: nobody declared is a failure either way.
    allow_lost: bool = False
    #: The node's fetch-by-id (``node.replication.fetch``, sync/sim/fetch.py): ``fetch_delay``
    #: (the node's grace, 1 s) after a member reports a dependency missing, the node's
    #: ``GapPlanner`` asks the original sender, then 3 other connected peers, one after the
    #: other over their links; what nobody answered is left to Recon. Off (and Recon off):
    #: SDS and SDS-R alone (the scale benchmark's ``--sds-r-only`` comparison).
    fetch: bool = False
    fetch_delay: float = FETCH_GRACE_S
    #: Recon (CIP-124) and the WANT/EVENTS transfer between mesh neighbours, with the node's
    #: round timer (``recon_interval``, ``[recon] interval_s``): sync/sim/replication.py.
    recon: bool = False
    recon_interval: float = 10.0
    #: Hostile members, one per behaviour named (sync/sim/hostile.py: clock, amplify, acks,
    #: withhold, junk).
    hostile: tuple[str, ...] = ()
    #: Decode each broadcast and check each signature once for the whole group
    #: (sync/sim/shared.py): same decisions, ~2x faster; off, every member does its own.
    shared: bool = True

    def command(self) -> str:
        """The ``python -m sync.sim`` command that replays this run."""
        args = [f"--members {self.members}", f"--seed {self.seed}", f"--rate {self.rate}",
                f"--duration {self.duration}", f"--settle {self.settle}",
                f"--loss {self.network.delivery_loss}", f"--link-loss {self.network.link_loss}",
                f"--degree {self.network.degree}", f"--bandwidth {self.network.bandwidth}",
                f"--crash-rate {self.crash_rate}", f"--leave-rate {self.leave_rate}",
                f"--join-rate {self.join_rate}", f"--skew {self.skew}"]
        args += [f"--partition {a},{b},{f}" for a, b, f in self.partitions]
        if not self.signed:
            args.append("--unsigned")
        if self.allow_lost:
            args.append("--allow-lost")
        if self.fetch:
            args.append("--fetch")
        if self.recon:
            args += ["--recon", f"--recon-interval {self.recon_interval}"]
        args += [f"--hostile {name}" for name in self.hostile]
        if not self.shared:
            args.append("--unshared")
        defaults = SdsConfig()
        for f in fields(SdsConfig):
            value = getattr(self.sds, f.name)
            if value != getattr(defaults, f.name):
                args.append(f"--sds {f.name}={value}")
        return "python -m sync.sim " + " ".join(args)


#: The scenarios ``make test`` sweeps over a few seeds and ``make sim`` over many (small groups
#: and short runs: each is seconds; the scale benchmark runs the large ones).
SWEEP: dict[str, Scenario] = {
    "loss": Scenario(members=20, duration=8, network=NetworkConfig(delivery_loss=0.05)),
    "churn": Scenario(members=12, duration=8, crash_rate=0.1, join_rate=0.1, leave_rate=0.05,
                      network=NetworkConfig(delivery_loss=0.02), fetch=True),
    "partition": Scenario(members=12, duration=8, partitions=((2.0, 6.0, 0.3),), skew=2.0,
                          fetch=True),
    "mesh": Scenario(members=12, duration=8,
                     network=NetworkConfig(degree=3, link_loss=0.05, bandwidth=200_000)),
    # Recon and fetch-by-id after a partition and through churn: every honest member ends
    # with every message (nothing may stay declared lost: Recon brings it).
    "recon": Scenario(members=16, duration=8, partitions=((1.0, 6.0, 0.4),), crash_rate=0.1,
                      join_rate=0.1, skew=1.0, recon=True, fetch=True,
                      network=NetworkConfig(delivery_loss=0.02)),
    # One member of each hostile behaviour (docs/security.md) in a lossy group with Recon.
    "hostile": Scenario(members=16, duration=8, recon=True, fetch=True,
                        hostile=("clock", "amplify", "acks", "withhold", "junk"),
                        network=NetworkConfig(delivery_loss=0.03)),
    # All of it at once: heavy loss, churn of every kind, a partition, skewed clocks and every
    # hostile behaviour, with Recon and fetch-by-id.
    "storm": Scenario(members=30, duration=8, crash_rate=0.3, join_rate=0.2, leave_rate=0.1,
                      skew=5.0, partitions=((2.0, 6.0, 0.4),), recon=True, fetch=True,
                      hostile=("clock", "amplify", "acks", "withhold", "junk"),
                      network=NetworkConfig(delivery_loss=0.1, link_loss=0.05)),
}
