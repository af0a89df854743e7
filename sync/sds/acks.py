"""Acknowledgement of our outgoing messages from what others send (spec, "Review ACK status").

Only what a sender signed counts as its evidence:

* the causal history is part of the signed event: a message naming ours acknowledges it;
* a bloom filter travels per transmission, outside the event's signature, so a relay could
  attach a filter of its own to somebody else's valid event. Our filters carry the sender's
  signature over them (``bloom_signature``, field 33; ``message.filter_signed_bytes``). A signed
  filter is evidence of its signer's receipts; an unsigned (or wrongly signed) one is at most a
  hint: it can make a message *possibly* acknowledged (resent less often), never acknowledged.
* "acknowledged" from filters needs what the spec asks for, several filters: at least
  ``ack_min_filters`` distinct signers (fewer only when we have heard from fewer other
  participants in the channel: in a pair, the one peer is the only possible recipient) whose
  false-positive rates multiply to at most ``ack_fp_bound``. One member lying about its
  receipts cannot stop our resends alone.

The signature is checked lazily, only when the filter would change an entry's state, so that
the common case (nothing outstanding, or nothing new in the filter) costs no verification.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sync.sds.bloom import BloomParams, BloomView, bloom_indices, index_mask
from sync.sds.buffers import OutgoingEntry
from sync.sds.config import SdsConfig
from sync.sds.message import SignedEvent, verify_filter

__all__ = ["MASKED_ENTRIES", "AckReview", "FilterEvidence", "review_acks"]

#: An entry first tested while the outgoing buffer holds at most this many keeps its bit
#: positions as one integer too (``index_mask``: one AND a test, ~0.4 us against ~0.9 on a
#: hit, in the hot review of a busy node's few hundred outstanding messages). The integer is
#: as wide as the filter (~860 bytes at the default geometry, more than a small event's
#: wire): after a burst of thousands, every entry held one for as long as it waited (~6 MiB
#: per 5,000 events, docs/ops/README.md "Memory"). Past this size entries keep their
#: positions only; at most this many integers are ever held.
MASKED_ENTRIES = 256


@dataclass
class FilterEvidence:
    """A received bloom filter with its (not yet checked) signature."""

    view: BloomView
    raw: bytes
    signature: bytes | None
    #: Signatures are not checked at all (a channel that verifies none): take it as signed.
    trusted: bool = False
    _signed: bool | None = None

    def signed_by(self, sender: str, channel_id: str) -> bool:
        if self._signed is None:
            self._signed = self.trusted or verify_filter(
                sender, channel_id, self.view.params, self.raw, self.signature)
        return self._signed


@dataclass
class AckReview:
    acknowledged: list[tuple[str, bool]] = field(default_factory=list)  # (id, by bloom)
    possibly: list[OutgoingEntry] = field(default_factory=list)  # newly possibly acknowledged


def review_acks(outgoing: Mapping[str, OutgoingEntry], event: SignedEvent,
                evidence: FilterEvidence | None, channel_id: str,
                config: SdsConfig, signers_needed: int,
                indexer: Callable[[str, BloomParams], tuple[int, ...]] = bloom_indices,
                ) -> AckReview:
    """``signers_needed``: distinct signed filters needed to acknowledge (see above);
    ``indexer``: the channel profile's bit positions of an id (``sync.sds.profile``)."""
    review = AckReview()
    done: set[str] = set()
    for h in event.causal_history:
        # A history may name an id twice (a hostile sender's): acknowledge it once.
        if h.message_id in outgoing and h.message_id not in done:
            done.add(h.message_id)
            review.acknowledged.append((h.message_id, False))
    if evidence is None:
        return review
    view, params, sender = evidence.view, evidence.view.params, event.sender_id
    for entry in outgoing.values():
        if entry.message_id in done or sender in entry.bloom_senders:
            continue
        mask = entry.masks.get(params)
        if mask is not None:
            if not view.contains_mask(mask):
                continue
        else:
            indices = entry.indices.get(params)
            if indices is None:
                indices = entry.indices[params] = indexer(entry.message_id, params)
                if len(outgoing) <= MASKED_ENTRIES:
                    entry.masks[params] = index_mask(indices, params)
            if not view.contains_indices(indices):
                continue
        indices = entry.indices[params]
        if not evidence.signed_by(sender, channel_id):
            if not entry.possibly:
                review.possibly.append(entry)
            continue
        # Filters of distinct signers are independent evidence: multiply their false-positive
        # rates (each from the filter's own size, hashes and fill).
        entry.bloom_senders.add(sender)
        # The rate for *this* id: double hashing gives fewer distinct bits than k when h2
        # shares a factor with m (in a small filter, often: m = 231 has 3, 7 and 11), and a
        # random id hits those few bits far more often than (ones/m)^k says.
        distinct = len(set(indices))
        rate = view.false_positive_rate
        if distinct < params.hashes:
            rate = rate ** (distinct / params.hashes)
        entry.fp_product *= rate
        if (len(entry.bloom_senders) >= signers_needed
                and entry.fp_product <= config.ack_fp_bound):
            review.acknowledged.append((entry.message_id, True))
        else:
            review.possibly.append(entry)
    return review
