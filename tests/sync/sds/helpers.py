"""In-memory participants and a lossy, reordering, duplicating broadcast link, on a fake clock."""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sync.identity import peer_id_of
from sync.sds import Acknowledged, Delivered, SdsChannel, SdsConfig, SdsEvent

T0 = 1_700_000_000.0
CHANNEL = "test-channel"


def key(i: int) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(bytes([i + 1]) * 32)


def channel(
    i: int, *, now: float = T0, config: SdsConfig | None = None, signed: bool = True
) -> SdsChannel:
    if signed:
        k = key(i)
        return SdsChannel(CHANNEL, peer_id_of(k), k, config, random.Random(i), now)
    return SdsChannel(CHANNEL, f"p{i}", None, config, random.Random(i), now, False)


def of_type(events: Iterable[SdsEvent], kind: type) -> list:  # type: ignore[type-arg]
    return [e for e in events if isinstance(e, kind)]


@dataclass
class Node:
    ch: SdsChannel
    delivered: list[Delivered] = field(default_factory=list)
    acked: set[str] = field(default_factory=set)
    sent: list[str] = field(default_factory=list)
    events: list[SdsEvent] = field(default_factory=list)


class Network:
    """Participants joined by a broadcast link. Each copy to each receiver is dropped with
    probability ``drop``, delayed by up to ``max_delay`` (so reordered) and duplicated with
    probability ``dup``."""

    def __init__(
        self,
        n: int,
        *,
        seed: int = 0,
        drop: float = 0.0,
        dup: float = 0.0,
        max_delay: float = 0.0,
        config: SdsConfig | None = None,
        signed: bool = True,
        now: float = T0,
    ) -> None:
        self.now = now
        self.rng = random.Random(seed)
        self.drop, self.dup, self.max_delay = drop, dup, max_delay
        self.nodes = [Node(channel(i, now=now, config=config, signed=signed)) for i in range(n)]
        self._queue: list[tuple[float, int, int, bytes]] = []
        self._seq = 0

    def _collect(self, i: int, sent: Sequence[bytes] = ()) -> None:
        """Node ``i``'s events, then ``sent`` (what its timers made) broadcast."""
        node = self.nodes[i]
        for ev in node.ch.events():
            node.events.append(ev)
            if isinstance(ev, Delivered):
                node.delivered.append(ev)
            elif isinstance(ev, Acknowledged):
                node.acked.add(ev.message_id)
        for data in sent:
            self.broadcast(i, data)

    def broadcast(self, src: int, data: bytes) -> None:
        for dst in range(len(self.nodes)):
            if dst == src or self.rng.random() < self.drop:
                continue
            copies = 2 if self.rng.random() < self.dup else 1
            for _ in range(copies):
                self._seq += 1
                at = self.now + self.rng.uniform(0.0, self.max_delay)
                heapq.heappush(self._queue, (at, self._seq, dst, data))

    def send(self, i: int, content: bytes) -> str:
        data = self.nodes[i].ch.send(content, self.now)
        self.broadcast(i, data)
        self._collect(i)
        mid = self.nodes[i].delivered[-1].message_id
        self.nodes[i].sent.append(mid)
        return mid

    def in_flight(self) -> int:
        return len(self._queue)

    def step(self, until: float) -> bool:
        """Process the next delivery or timer due no later than ``until``; False if none."""
        timers = [(t, i) for i, n in enumerate(self.nodes) if (t := n.ch.get_timer()) is not None]
        next_timer = min(timers) if timers else None
        next_msg = self._queue[0][0] if self._queue else None
        candidates = [t for t in (next_msg, next_timer[0] if next_timer else None) if t is not None]
        if not candidates or min(candidates) > until:
            self.now = max(self.now, until)
            return False
        if next_msg is not None and (next_timer is None or next_msg <= next_timer[0]):
            at, _, dst, data = heapq.heappop(self._queue)
            self.now = max(self.now, at)
            self.nodes[dst].ch.receive(data, self.now)
            self._collect(dst)
        else:
            assert next_timer is not None
            self.now = max(self.now, next_timer[0])
            sent = self.nodes[next_timer[1]].ch.handle_timer(self.now)
            self._collect(next_timer[1], sent)
        return True

    def run_for(self, seconds: float) -> None:
        until = self.now + seconds
        while self.step(until):
            pass

    def quiet(self) -> bool:
        logs = [n.ch.layers.log.entries() for n in self.nodes]
        return (
            not self._queue
            and all(log == logs[0] for log in logs)
            and all(
                not (layers.outgoing.ids or layers.incoming.waiting_ids
                     or layers.incoming.missing_ids)
                and not (layers.repair.request_ids or layers.repair.response_ids)
                for layers in (n.ch.layers for n in self.nodes)
            )
        )

    def run_until_quiet(self, *, max_seconds: float, check_every: float = 1.0) -> bool:
        deadline = self.now + max_seconds
        while self.now < deadline:
            if self.quiet():
                return True
            self.run_for(check_every)
        return self.quiet()
