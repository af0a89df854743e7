"""Making a node's SDS channels: fresh, or restored at start-up from the state saved in the
database and the newest part of the channel's log (bounded time and memory however long the
log is); the database answers for delivered ids older than what a channel keeps in memory
(``DeliveredReads``: asked between steps, never inside one).
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.replication.delivered_reads import DeliveredReads
from node.store.events import EventStore
from node.telemetry.logs import kv
from node.telemetry.metrics import Metrics
from storage import events_by_message_ids, get_state, read_channel_newest
from sync.errors import RemoteProtocolError
from sync.sds import (
    ChannelState,
    ReadDelivered,
    SdsChannel,
    SdsConfig,
    decode_state,
    state_reads,
)
from sync.sds.state import encode_state

__all__ = ["ChannelMaker"]

log = logging.getLogger("syncnode.channels")


@dataclass
class ChannelMaker:
    peer_id: str
    key: Ed25519PrivateKey
    sds_config: SdsConfig
    #: channel -> SDS profile (sync.sds.profile); absent: "syncnode".
    profiles: Mapping[str, str]
    store: EventStore
    metrics: Metrics

    def config(self, name: str) -> SdsConfig:
        return replace(self.sds_config, profile=self.profiles.get(name, "syncnode"))

    def fresh(self, name: str, now: float) -> SdsChannel:
        return SdsChannel(name, self.peer_id, self.key, self.config(name), random.Random(), now,
                          bounded=True)

    async def restore(self, name: str, now: float) -> SdsChannel:
        """The channel as saved (or fresh), with the newest part of its log."""
        cfg = self.sds_config
        # Only the newest part of the log: what the channel keeps in memory (its delivered
        # window covers the bloom filter, the history tail and the repair cache); the
        # database answers for older ids.
        limit = max(cfg.delivered_window, cfg.repair_cache_size)
        state = await self.store.read(get_state, f"sds/{name}")
        rows = await self.store.read(read_channel_newest, name, limit)
        log_entries = [(e.message_id, e.lamport, e.sender) for e in rows]
        cached = rows[len(rows) - cfg.repair_cache_size :] if cfg.repair_cache_size else []
        wires = [e.wire for e in cached]
        in_cache = {e.message_id for e in cached}
        del rows, cached
        if state is None:
            if not log_entries:
                return self.fresh(name, now)
            state = encode_state(self.fresh(name, now).snapshot())
        snap: bytes | ChannelState = state
        outgoing: dict[str, bytes] = {}
        delivered: tuple[ReadDelivered, set[str]] | None = None
        try:
            snap = decode_state(state)
            asked = tuple(state_reads(snap, cfg.max_message_size))
        except RemoteProtocolError:
            pass  # restore() below reports it and starts afresh
        else:
            # What restoring the buffers asks of the log, read before (no SQL inside it).
            delivered = (ReadDelivered(asked),
                         await DeliveredReads(self.store, self.metrics).read(name, asked))
            # Our unacknowledged messages are saved by id (sync.sds.state): their wires come
            # from the log (the newest rows, passed as cached_wires, hold most of them).
            ids = [o.message_id for o in snap.outgoing
                   if o.wire is None and o.message_id not in in_cache]
            if ids:
                rows = await self.store.read(events_by_message_ids, ids)
                outgoing = {e.message_id: e.wire for e in rows if e.channel == name}
                del rows
        restore = functools.partial(
            SdsChannel.restore, log=log_entries, cached_wires=wires, outgoing_wires=outgoing,
            config=self.config(name),
            rng=random.Random(), now=now, bounded=True,
            log_truncated=len(log_entries) >= limit,
            # The node reconciles with each peer after a restart, which carries what a peer
            # lacks of our unacknowledged messages; resending them raced it (sync.sds.persist).
            resend_restored=False,
        )
        try:
            ch = restore(snap, self.key, delivered=delivered)
        except Exception:  # a corrupt state blob must not keep the node down
            log.exception("cannot restore channel state; starting it afresh from the log",
                          extra=kv(channel=name))
            ch = restore(encode_state(self.fresh(name, now).snapshot()), self.key)
        if ch.layers.stats.outgoing_unrestored:
            log.warning("own unacknowledged events not in the log; not resent",
                        extra=kv(channel=name, count=ch.layers.stats.outgoing_unrestored))
        if left := ch.layers.stats.outgoing_overdue + ch.layers.stats.outgoing_left:
            log.info("own unacknowledged events left to Recon after the restart",
                     extra=kv(channel=name, count=left))
        if ch.layers.stats.clock_recovered:
            self.metrics.inc("sds_clock_recovered_total", channel=name)
            log.warning("persisted Lamport clock out of range; reset within the clock rule",
                        extra=kv(channel=name, lamport=ch.layers.incoming.lamport))
        log.info("channel restored", extra=kv(channel=name, events_loaded=len(log_entries),
                                              lamport=ch.layers.incoming.lamport))
        return ch
