"""The bloom filter our transmissions carry (issue 31: it was ~1.2 KB of a 1.7 KB message).

The spec has each participant keep a filter of received content ids, rolled over at a
capacity it leaves to the application, and include it in every message so that senders learn
what arrived. A filter only tells a sender something when the id is not acknowledged to it
already: an id named in a causal history is acknowledged by that history (a MUST on the
sender's side), and our histories name the DAG heads, so nearly every id is named within a
message or two. What is left is small: ids received that no history we saw or sent named yet,
and ids received *again* (a resend or a repair: their sender has not seen an acknowledgement).

So :class:`AckFilter` keeps the rolling filter of the newest ``bloom_capacity`` ids as before,
and beside it the ordered set of such unnamed ids (at most ``bloom_capacity``, the oldest
dropped). A transmission carries a filter of the unnamed ids only, sized for their number (a
power of two of at least 8) while there are at most ``bloom_small_max`` of them; beyond that,
the full rolling filter as before. The small filter's design rate is ``ack_fp_bound`` (1e-6;
about 29 bits per id): members' small filters hold nearly the same ids with the same fixed
hashing, so their false positives are correlated and multiplying their rates (the promotion
rule) would overstate the evidence; sized so, one filter alone meets the bound. The simulator
caught the first choice (1e-3 per filter) acknowledging a message nobody held. The bit
positions and the wire are the same as before (fields 31 and 32 give m and k), so any
receiver reads either. docs/sds.md section 3 has the argument and the figures.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from bitarray import bitarray

from sync.sds.bloom import BloomParams, RollingBloomFilter, bloom_indices

__all__ = ["AckFilter"]

_MIN_CLASS = 8


def _prime_from(n: int) -> int:
    while any(n % d == 0 for d in range(2, int(n ** 0.5) + 1)):
        n += 1
    return n


class AckFilter:
    """``small_max`` 0: always the full filter (a profile whose filter is fixed, like waku's)."""

    def __init__(self, full: RollingBloomFilter, fp_rate: float, small_max: int,
                 small_max_request_sync: int = 0) -> None:
        self.full = full
        self._fp = fp_rate
        self._small_max = min(small_max, full.window)
        #: ``encoded(request_sync=True)``'s own bound; the unnamed set is tracked if any is on.
        self._small_max_sync = min(small_max_request_sync, full.window)
        self._tracking = bool(self._small_max or self._small_max_sync)
        #: id -> its sender, oldest first.
        self._unnamed: OrderedDict[str, str] = OrderedDict()
        self._params: dict[int, BloomParams] = {}
        self._encoded: tuple[bytes, BloomParams] | None = None

    def __len__(self) -> int:
        return len(self._unnamed)

    def received(self, mid: str, sender: str, *, again: bool = False) -> None:
        """A content message arrived (``again``: a copy of one delivered or waiting already:
        only the unnamed set takes it back)."""
        if not again:
            self.full.add(mid)
        if not self._tracking:
            return
        unnamed = self._unnamed
        if mid in unnamed:
            unnamed.move_to_end(mid)
            return
        unnamed[mid] = sender
        if len(unnamed) > self.full.window:
            unnamed.popitem(last=False)
        self._encoded = None

    def named(self, ids: Iterable[str], by: str) -> None:
        """A causal history by ``by`` (received, or one of ours) named ``ids``: acknowledged
        to their senders by that history, no longer needed in our filter. A sender's own
        history acknowledges nothing to it (its next message names its previous one)."""
        unnamed = self._unnamed
        if not unnamed:
            return
        for mid in ids:
            if unnamed.get(mid, by) != by:
                del unnamed[mid]
                self._encoded = None

    def encoded(self, *, request_sync: bool = False) -> tuple[bytes, BloomParams]:
        """The filter to transmit and its parameters (``request_sync``: for a sync sent only
        for due repair requests)."""
        count = len(self._unnamed)
        limit = self._small_max_sync if request_sync else self._small_max
        if not limit or count > limit:
            return self.full.to_bytes(), self.full.params
        if self._encoded is None:
            size = _MIN_CLASS
            while size < count:
                size *= 2
            params = self._params.get(size)
            if params is None:
                best = BloomParams.optimal(size, self._fp)
                # A prime m: with double hashing, an h2 sharing a factor with m gives an id
                # fewer than k distinct bits (sync.sds.acks weighs such a hit accordingly).
                params = self._params[size] = BloomParams(_prime_from(best.bits), best.hashes)
            if params.nbytes >= self.full.params.nbytes:  # no smaller: the full filter
                return self.full.to_bytes(), self.full.params
            bits = bitarray(params.bits, endian="big")
            bits.setall(0)
            for mid in self._unnamed:
                for i in bloom_indices(mid, params):
                    bits[i] = 1
            self._encoded = (bits.tobytes(), params)
        return self._encoded
