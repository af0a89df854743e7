"""The layers an ``SdsChannel`` is made of, as one record: what its callers read
(``SdsChannel.layers``) and its persistence (``sync.sds.persist``) reads into a
``ChannelState`` and fills back from one, through each layer's own public members."""

from __future__ import annotations

from dataclasses import dataclass

from sync.sds.bloom import RollingBloomFilter
from sync.sds.config import SdsConfig
from sync.sds.delivered import DeliveredIndex
from sync.sds.history import CausalHistory
from sync.sds.incoming import Incoming
from sync.sds.outgoing import OutgoingBuffer
from sync.sds.repair_buffers import RepairBuffers
from sync.sds.signatures import VerifiedSignatures
from sync.sds.stats import ChannelStats
from sync.sds.sync_schedule import SyncSchedule
from sync.sds.timers import TimerQueue

__all__ = ["ChannelLayers"]


@dataclass(frozen=True, slots=True)
class ChannelLayers:
    config: SdsConfig
    #: Every deadline of the channel (one heap).
    timers: TimerQueue
    #: Delivered ids (``sync.sds.delivered``).
    log: DeliveredIndex
    #: Heads, the log's recent tail and retrieval hints (``sync.sds.history``).
    history: CausalHistory
    #: The rolling filter of received ids our transmissions carry.
    bloom: RollingBloomFilter
    #: Delivery, the dependency buffer and the Lamport clock (``sync.sds.incoming``).
    incoming: Incoming
    #: Our unacknowledged messages (``sync.sds.outgoing``).
    outgoing: OutgoingBuffer
    #: SDS-R (``sync.sds.repair_buffers``).
    repair: RepairBuffers
    #: The sync timers (``sync.sds.sync_schedule``).
    schedule: SyncSchedule
    #: Signatures known to be valid (``sync.sds.signatures``): ``trust`` one checked elsewhere.
    signatures: VerifiedSignatures
    stats: ChannelStats

    def sizes(self) -> dict[str, int]:
        """How much each bounded structure holds now (no copies: cheap enough to check
        after every step, as the simulator does)."""
        repair, incoming = self.repair, self.incoming
        return {"heads": len(self.history.heads), "waiting": len(incoming.waiting),
                "missing": len(incoming.missing), "repair_cache": len(repair.cache),
                "repair_requests": len(repair.requests),
                "repair_responses": len(repair.responses), "members": len(repair.members),
                "outgoing": len(self.outgoing.entries)}
