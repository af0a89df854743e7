"""SDS messages on their way out to GossipSub: queued by the channel service, held back by the
linger rule while the node is busy (``sync.linger``) so that more join them, gathered into one
payload per channel (``sync.gossip.OutgoingBatch``), kept to the pace our peers' gossip budgets
take from one publisher (``sync.gossip.GossipPace``) and published on the channel's topic.
"""

from __future__ import annotations

import logging
import math

import trio

from node.clock import Clock
from node.p2p import P2PError, P2PHost
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from sync.gossip import GossipLimits, GossipPace, OutgoingBatch, batch_would_fill
from sync.linger import Linger

__all__ = ["GossipOutbox", "topic_of"]

log = logging.getLogger("syncnode.channels")


def topic_of(network_id: int, channel: str) -> str:
    return f"/syncnode/{network_id}/sds/{channel}"


class GossipOutbox:
    def __init__(self, host: P2PHost, network_id: int, metrics: Metrics, clock: Clock,
                 linger_s: float = 0.0, limits: GossipLimits | None = None) -> None:
        self.host = host
        self.clock = clock
        self._limits = limits or GossipLimits()
        self._pace: GossipPace | None = None  # made in run(), where the clock can be read
        self.network_id = network_id
        self.metrics = metrics
        self._linger = Linger(linger_s)
        self._send, self._receive = trio.open_memory_channel[tuple[str, bytes]](math.inf)
        # What is queued and not yet taken into a batch: whether it fills one already.
        self._queued_items = 0
        self._queued_bytes = 0

    def queue(self, channel: str, data: bytes) -> None:
        self._linger.note(self.clock.now())
        self._queued_items += 1
        self._queued_bytes += len(data)
        self._send.send_nowait((channel, data))

    def _took(self, data: bytes) -> None:
        self._queued_items -= 1
        self._queued_bytes -= len(data)

    async def run(self) -> None:
        self._pace = GossipPace(self._limits, self.clock.now())
        async for name, data in self._receive:
            full = batch_would_fill(self._queued_items, self._queued_bytes)
            delay = self._linger.delay(self.clock.now(), batch_full=full)
            if delay:  # busy: let the messages due meanwhile join this gossip message
                await trio.sleep(delay)
            batch = OutgoingBatch()
            batch.add(name, data)
            self._took(data)
            while not batch.full:
                try:
                    item = self._receive.receive_nowait()
                except trio.WouldBlock:
                    break
                batch.add(*item)
                self._took(item[1])
            await self._keep_pace(batch)
            for channel, payload in batch.payloads():
                try:
                    await self.host.publish(topic_of(self.network_id, channel), payload)
                    self.metrics.inc("gossip_bytes_sent_total", len(payload))
                except P2PError as exc:
                    # Only an oversized payload fails here; the 512 KiB content limit of every
                    # local publisher and the batch limit keep payloads under the gossip limit,
                    # so there is no counter that could never move (Recon carries the events).
                    log.warning("publish failed", extra=kv(channel=channel, error=str(exc)))

    async def _keep_pace(self, batch: OutgoingBatch) -> None:
        """Wait until our peers' budgets for us have room for ``batch`` (counted in
        ``gossip_paced_seconds_total``: how long local bursts waited for it)."""
        assert self._pace is not None
        while (wait := self._pace.delay(batch.cost, self.clock.now())) > 0:
            self.metrics.inc("gossip_paced_seconds_total", wait)
            await trio.sleep(wait)
