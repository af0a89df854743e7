"""SDS profiles: what a channel writes on the wire and what it accepts (docs/interop.md).

* ``syncnode`` (default): message id = our event digest, Ed25519 signatures required, a rolling
  filter sized from the config whose parameters travel with it (fields 31/32).
* ``waku``: exactly the wire of @waku/sds 0.0.8 (``sync.sds.waku``): id = sha256(payload), no
  signatures, its fixed 150,000-bit filter. Unsigned messages are accepted on such a channel
  only: anyone who can publish on it can write any sender id (the trust trade-off).

A profile is chosen per channel (``SdsConfig.profile``); every protocol step in between (causal
order, acknowledgements, resends, SDS-R repair) is the channel's and the same for both.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sync.sds.bloom import BloomParams, BloomView, bloom_indices
from sync.sds.config import SdsConfig
from sync.sds.message import (
    DEFAULT_MAX_SIZE,
    DecodeLimits,
    HistoryRef,
    SignedEvent,
    Transmission,
    decode_transmission,
    encode_event,
    without_signature,
)
from sync.sds.repair import repair_hash
from sync.sds.waku import (
    WAKU_BLOOM,
    WAKU_BLOOM_CAPACITY,
    WAKU_CAUSAL_HISTORY_SIZE,
    check_waku_message_id,
    waku_bloom_indices,
    waku_message_id,
    waku_repair_hash,
    waku_sync_id,
)

__all__ = [
    "PROFILES",
    "SYNCNODE",
    "WAKU",
    "SdsProfile",
    "decode_event_by_channel",
    "decode_event_in",
    "peek_event",
    "profile_of",
]

SYNCNODE = "syncnode"
WAKU = "waku"
PROFILES = (SYNCNODE, WAKU)
Indexer = Callable[[str, BloomParams], tuple[int, ...]]


@dataclass(frozen=True)
class SdsProfile:
    """The wire rules of one profile, bound to a channel's config."""

    name: str
    #: Messages must carry a valid Ed25519 signature by their sender.
    signed: bool
    bloom_params: BloomParams
    #: Ids in our rolling filter.
    bloom_window: int
    #: Write ``bloom_bits``/``bloom_hashes`` next to the filter (a waku filter has one shape).
    announces_bloom_params: bool
    indices: Indexer
    repair_hash: Callable[..., int]
    limits: DecodeLimits

    @property
    def is_waku(self) -> bool:
        return self.name == WAKU

    def encode(self, channel_id: str, sender_id: str, lamport: int | None,
               history: tuple[HistoryRef, ...], content: bytes,
               key: Ed25519PrivateKey | None, rng: random.Random) -> SignedEvent:
        if not self.is_waku:
            return encode_event(channel_id, sender_id, lamport, history, content, key)
        mid = waku_message_id(content) if content else waku_sync_id(rng)
        return encode_event(channel_id, sender_id, lamport, history, content, None,
                            message_id=mid)

    def decode(self, data: bytes, *, check_id: bool, verify_signature: bool,
               known_signatures: Mapping[str, bytes] | None) -> Transmission:
        """A received message under this profile's rules; ``RemoteProtocolError`` if bad."""
        if not self.is_waku:
            return decode_transmission(data, self.limits, check_id=check_id,
                                       verify_signature=verify_signature,
                                       known_signatures=known_signatures)
        tx = decode_transmission(data, self.limits, check_id=False, verify_signature=False)
        event = tx.event
        if check_id:
            check_waku_message_id(event.message_id, event.content)
        if event.signature is not None:
            # Not a field of the waku wire: stored and relayed without it.
            tx = tx._replace(event=without_signature(event))
        # The package reads a filter with its own shape whatever else the message says.
        return tx._replace(bloom_params=WAKU_BLOOM if tx.bloom_filter is not None else None)

    def view(self, tx: Transmission, max_bits: int) -> BloomView | None:
        if tx.bloom_filter is None or tx.bloom_params is None:
            return None
        return BloomView(tx.bloom_filter, tx.bloom_params, max_bits=max_bits)


def profile_of(config: SdsConfig) -> SdsProfile:
    limits = DecodeLimits(
        max_size=config.max_message_size,
        max_history_entries=config.max_history_entries,
        max_repair_entries=config.max_repair_entries,
        max_id_length=config.max_id_length,
        max_hint_length=config.max_hint_length,
    )
    if config.profile == WAKU:
        return SdsProfile(
            WAKU, signed=False, bloom_params=WAKU_BLOOM, bloom_window=WAKU_BLOOM_CAPACITY,
            announces_bloom_params=False, indices=waku_bloom_indices,
            repair_hash=waku_repair_hash,
            # The package sends up to 200 history entries by default.
            limits=replace(limits, max_history_entries=max(limits.max_history_entries,
                                                           WAKU_CAUSAL_HISTORY_SIZE)),
        )
    return SdsProfile(
        SYNCNODE, signed=True,
        bloom_params=BloomParams.optimal(config.bloom_capacity, config.bloom_fp_rate),
        bloom_window=config.bloom_capacity, announces_bloom_params=True, indices=bloom_indices,
        repair_hash=repair_hash, limits=limits,
    )


def decode_event_in(profile: str, wire: bytes, *, max_size: int = DEFAULT_MAX_SIZE,
                    verify_signature: bool = True) -> SignedEvent:
    """``decode_event`` under a channel's profile: a stored or fetched event of a waku channel
    is checked against its payload hash and needs no signature."""
    if profile != WAKU:
        return decode_transmission(wire, DecodeLimits(max_size=max_size),
                                   verify_signature=verify_signature).event
    limits = DecodeLimits(max_size=max_size, max_history_entries=WAKU_CAUSAL_HISTORY_SIZE)
    tx = decode_transmission(wire, limits, check_id=False, verify_signature=False)
    check_waku_message_id(tx.event.message_id, tx.event.content)
    if tx.event.signature is not None:
        return without_signature(tx.event)
    return tx.event



def peek_event(wire: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> SignedEvent:
    """The fields of an event, bounded but unchecked (no id, no signature): to find out which
    channel (and so which profile) it claims, before the checks of that profile."""
    limits = DecodeLimits(max_size=max_size, max_history_entries=WAKU_CAUSAL_HISTORY_SIZE)
    return decode_transmission(wire, limits, check_id=False, verify_signature=False).event


def decode_event_by_channel(wire: bytes, profiles: Mapping[str, str], *,
                            max_size: int = DEFAULT_MAX_SIZE,
                            verify_signature: bool = True) -> SignedEvent:
    """``decode_event`` under the profile of the channel the event names (``profiles``: channel
    -> profile; absent channels are "syncnode"). Without any waku channel this is exactly
    ``decode_event`` (one parse)."""
    if WAKU in profiles.values():
        channel = peek_event(wire, max_size=max_size).channel_id
        profile = profiles.get(channel, SYNCNODE)
    else:
        profile = SYNCNODE
    return decode_event_in(profile, wire, max_size=max_size, verify_signature=verify_signature)
