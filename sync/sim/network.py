"""The simulated network: a GossipSub-like mesh with per-link latency, loss and bandwidth,
partitions and members that are offline. Sans-IO and seeded: a flood is computed at once from
the mesh (the earliest arrival at every member, with every duplicate copy counted), and the
simulator schedules the deliveries.

Model (docs/sim.md): each member keeps ``degree`` mesh peers (a random graph, links both
ways). A message is forwarded once by every member that receives it, to all its mesh peers
but the one it came from (GossipSub's mesh flooding; IHAVE/IWANT gossip is not modelled), so a
member receives about ``degree`` copies and the first one counts. A link adds its latency
(fixed per link, uniform in ``latency``) plus the time the sender's uplink needs for the copies
queued before it (``bandwidth`` bytes/s; within one flood). ``link_loss`` drops one copy on one
link; ``delivery_loss`` drops a message at a member's application (it missed it whatever the
mesh did: the loss the issue's figures are given for). Members on different sides of a
partition, and offline members, exchange nothing.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

__all__ = ["Flood", "Mesh", "NetworkConfig"]


@dataclass(frozen=True)
class NetworkConfig:
    degree: int = 6
    latency: tuple[float, float] = (0.020, 0.200)
    link_loss: float = 0.0
    delivery_loss: float = 0.0
    #: Uplink bytes per second per member (0: unlimited).
    bandwidth: float = 0.0


@dataclass
class Flood:
    """One message's spread: first arrival per member, and copies sent / received."""

    arrival: dict[int, float]
    sent: dict[int, int]
    received: dict[int, int]


class Mesh:
    def __init__(self, n: int, config: NetworkConfig, rng: random.Random) -> None:
        self.config = config
        self.rng = rng
        self.peers: list[list[int]] = [[] for _ in range(n)]
        self.latency: dict[tuple[int, int], float] = {}
        for member in range(n):
            self._fill(member)

    def _link(self, a: int, b: int) -> None:
        lo, hi = self.config.latency
        self.peers[a].append(b)
        self.peers[b].append(a)
        self.latency[(a, b)] = self.latency[(b, a)] = self.rng.uniform(lo, hi)

    def _fill(self, member: int, alive: list[bool] | None = None) -> None:
        n = len(self.peers)
        want = min(self.config.degree, n - 1)
        tries = 0
        while len(self.peers[member]) < want and tries < 20 * want:
            tries += 1
            other = self.rng.randrange(n)
            if other == member or other in self.peers[member]:
                continue
            if alive is not None and not alive[other]:
                continue
            if len(self.peers[other]) >= 2 * self.config.degree:
                continue
            self._link(member, other)

    def detach(self, member: int, alive: list[bool]) -> None:
        """``member`` went offline: its mesh peers drop it and graft others (GossipSub keeps
        each mesh at its degree), among the members ``alive``."""
        former = self.peers[member]
        self.peers[member] = []
        for peer in former:
            self.peers[peer].remove(member)
        for peer in former:
            if alive[peer]:
                self._fill(peer, alive)

    def attach(self, member: int, alive: list[bool]) -> None:
        """``member`` came back online: it grafts a fresh mesh."""
        self._fill(member, alive)

    def add_member(self, alive: list[bool] | None = None) -> int:
        self.peers.append([])
        member = len(self.peers) - 1
        self._fill(member, alive)
        return member

    def flood(self, origin: int, size: int, start: float, reachable: list[bool],
              side: list[int]) -> Flood:
        """Spread a message of ``size`` bytes from ``origin`` at ``start``: Dijkstra over the
        mesh, skipping offline members (``reachable``), links across a partition (``side``)
        and lost copies."""
        cfg, rng, latency = self.config, self.rng, self.latency
        per_copy = size / cfg.bandwidth if cfg.bandwidth > 0 else 0.0
        arrival = {origin: start}
        came_from = {origin: -1}
        sent: dict[int, int] = {}
        received: dict[int, int] = {}
        heap = [(start, origin)]
        done: set[int] = set()
        loss = cfg.link_loss
        while heap:
            t, member = heapq.heappop(heap)
            if member in done:
                continue
            done.add(member)
            copies = 0
            for peer in self.peers[member]:
                if peer == came_from[member] or not reachable[peer] or side[peer] != side[member]:
                    continue
                copies += 1
                if loss and rng.random() < loss:
                    continue
                received[peer] = received.get(peer, 0) + 1
                at = t + latency[(member, peer)] + copies * per_copy
                if at < arrival.get(peer, float("inf")):
                    arrival[peer] = at
                    came_from[peer] = member
                    heapq.heappush(heap, (at, peer))
            sent[member] = copies
        del arrival[origin]
        return Flood(arrival, sent, received)
