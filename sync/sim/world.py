"""What the simulation's parts share without importing the runner: a member
(:class:`Member`), the failure a broken invariant raises (:class:`SimFailure`), one member's
replication state (:class:`PeerState`), and what the runner offers the parts it drives
(:class:`World`: the hostile members, the invariants, Recon and fetch-by-id read and call
these of the running ``Simulation``). Typed this way the parts import this module, never the
runner (which imports them): no import circle.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sync.errors import RemoteProtocolError
from sync.replication import ReplicationCore
from sync.sds import SdsChannel
from sync.sim.keylog import KeyLog
from sync.sim.network import Mesh
from sync.sim.scenario import Scenario
from sync.sim.stats import Stats

__all__ = ["HostileView", "Member", "PeerState", "SimFailure", "World"]


class SimFailure(AssertionError):
    """An invariant did not hold; the message says which and how to replay the run."""


@dataclass
class Member:
    index: int
    key: Ed25519PrivateKey
    peer_id: str
    channel: SdsChannel
    #: Local clock = simulated time + this (EPOCH plus the member's skew).
    clock: float
    joined_at: float
    online: bool = True
    gone: bool = False
    honest: bool = True
    timer_at: float | None = None
    #: Message numbers delivered, as a bitmap (1 byte per message of the run).
    log: bytearray = field(default_factory=bytearray)
    #: How many messages ``log`` holds.
    held: int = 0
    #: Message ids this member declared irretrievably lost.
    declared_lost: set[str] = field(default_factory=set)


@dataclass
class PeerState:
    """One member's replication state beside its SDS channel."""

    keys: KeyLog  # the member's log of Recon keys and its key store (``sync.sim.keylog``)
    core: ReplicationCore  # the node's: Recon sessions and fetches by id, one timer
    timer_at: float | None = None


class HostileView(Protocol):
    """What the other parts ask of the hostile members (``sync.sim.hostile``)."""

    @property
    def behaviour(self) -> dict[int, str]: ...

    def withholds(self, m: Member) -> bool: ...


class World(Protocol):
    """The running simulation, as its parts see it (``sync.sim.runner.Simulation``)."""

    @property
    def sc(self) -> Scenario: ...
    @property
    def now(self) -> float: ...
    @property
    def rng(self) -> random.Random: ...
    @property
    def members(self) -> Sequence[Member]: ...
    @property
    def stats(self) -> Stats: ...
    @property
    def mesh(self) -> Mesh: ...
    @property
    def hostile(self) -> HostileView | None: ...
    @property
    def channel(self) -> str: ...
    #: message number -> id, Lamport time, sender; id -> message number, wire
    @property
    def ids(self) -> Sequence[str]: ...
    @property
    def lamport_of(self) -> Sequence[int]: ...
    @property
    def senders(self) -> Sequence[str]: ...
    @property
    def msg_no(self) -> dict[str, int]: ...
    @property
    def wires(self) -> dict[str, bytes]: ...
    @property
    def honest_holders(self) -> Sequence[int]: ...
    @property
    def published_at(self) -> Sequence[float]: ...
    @property
    def by_peer_id(self) -> dict[str, int]: ...
    @property
    def repair_windows(self) -> dict[int, deque[tuple[float, int]]]: ...

    def push(self, at: float, kind: int, member: int = -1, payload: int = -1) -> None: ...
    def reachable(self, a: int, b: int) -> bool: ...
    def broadcast(self, m: Member, data: bytes) -> None: ...
    def receive_fetched(self, m: Member, wire: bytes) -> None: ...
    def rejected(self, m: Member, origin: int, exc: RemoteProtocolError) -> None: ...
    def fail(self, what: str) -> SimFailure: ...
