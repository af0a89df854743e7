"""The wire rules of @waku/sds 0.0.8 (js-waku's SDS), for channels with ``profile = "waku"``.

What that package writes and reads, learnt from its published source (docs/interop.md):

* ``message_id`` = lower-case hex of sha256(payload) for content and ephemeral messages; a sync
  message (no payload) is named ``"sync-"`` plus a random base-36 string.
* No signature, no bloom parameters on the wire: the filter has a fixed shape, derived from
  capacity 10,000 and error rate 0.001 the way the package does (bits per element
  ceil(-ln p / ln^2 2) = 15, k = round(ln 2 * 15) = 10, m = 150,000 bits), stored in
  1 + m div 64 = 2,344 unsigned 64-bit words and sent as those words, big-endian (18,752 bytes).
  Bit ``h`` is bit ``h mod 64`` (counted from the least significant end) of word ``h div 64``.
* Hashing: Nim's ``hash(string)`` (MurmurHash3 x86 32-bit, seed 0, as a signed int32) with
  Kirsch-Mitzenmacher double hashing: ``a = |hash(id)| mod m``, ``b = |hash(id & " b")| mod m``,
  index ``i`` = ``|a + i * b| mod m``.
* SDS-R hashes: ``hash(x, y)`` = first 8 bytes, big-endian, of sha256(utf8(x ‖ y)) (plain
  concatenation, where ours length-prefixes the parts).

Our rolling filter keeps bits in big-endian bit order, so a waku bit ``h`` lives at our position
``64 * (h div 64) + 63 - h mod 64``: the bytes of our filter are then exactly the package's words.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterable

import mmh3

from sync.errors import ErrorKind, RemoteProtocolError
from sync.sds.bloom import BloomParams
from sync.sds.delivered import DeliveredIndex, ReadDelivered

__all__ = [
    "WAKU_BLOOM",
    "WAKU_BLOOM_BITS",
    "WAKU_BLOOM_BYTES",
    "WAKU_BLOOM_CAPACITY",
    "WAKU_BLOOM_ERROR_RATE",
    "WAKU_BLOOM_HASHES",
    "WAKU_CAUSAL_HISTORY_SIZE",
    "check_waku_message_id",
    "send_reads",
    "waku_bloom_indices",
    "waku_hash_n",
    "waku_message_id",
    "waku_repair_hash",
    "waku_sync_id",
]

WAKU_BLOOM_CAPACITY = 10_000
WAKU_BLOOM_ERROR_RATE = 0.001
_BITS_PER_ELEMENT = math.ceil(-math.log(WAKU_BLOOM_ERROR_RATE) / math.log(2) ** 2)
WAKU_BLOOM_HASHES = round(math.log(2) * _BITS_PER_ELEMENT)
#: The package's ``totalBits``: the modulus of its hashes.
WAKU_BLOOM_BITS = WAKU_BLOOM_CAPACITY * _BITS_PER_ELEMENT
_WORDS = 1 + WAKU_BLOOM_BITS // 64
WAKU_BLOOM_BYTES = 8 * _WORDS
#: The shape of our copy of such a filter: every bit of its words (the tail past
#: ``WAKU_BLOOM_BITS`` is never set), with the package's number of hashes.
WAKU_BLOOM = BloomParams(64 * _WORDS, WAKU_BLOOM_HASHES)
#: Causal history entries the package puts in each message by default (its decoder takes any
#: number; ours must take at least this many on a waku channel).
WAKU_CAUSAL_HISTORY_SIZE = 200
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def waku_message_id(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def send_reads(log: DeliveredIndex, contents: Iterable[bytes]) -> ReadDelivered | None:
    """What sending ``contents`` on a waku channel whose log is ``log`` must know first (it
    refuses a payload it sent already: the id is the payload's hash); None: nothing to ask."""
    if not log.bounded:
        return None
    return log.reads_for([waku_message_id(c) for c in contents], {})


def check_waku_message_id(message_id: str, payload: bytes) -> None:
    """A message with a payload is named by its hash (what the package's senders do); a sync
    message (no payload) can be named anything."""
    if payload and message_id != waku_message_id(payload):
        raise RemoteProtocolError("message id is not the sha256 of the payload",
                                  kind=ErrorKind.BAD_ID)


def waku_sync_id(rng: random.Random) -> str:
    """A sync message id as the package makes them (``"sync-"`` + ~11 base-36 digits)."""
    return "sync-" + "".join(rng.choice(_BASE36) for _ in range(11))


def _nim_hash(item: str) -> int:
    # The package hashes the string's UTF-16 code units as bytes; ids are hex (ASCII) here,
    # and anything outside Latin-1 cannot be an id of a waku channel.
    try:
        data = item.encode("latin-1")
    except UnicodeEncodeError:
        raise RemoteProtocolError("waku bloom ids are Latin-1 text",
                                  kind=ErrorKind.MALFORMED_EVENT) from None
    return int(mmh3.hash(data, 0, signed=True))


def waku_hash_n(item: str, n: int, max_value: int = WAKU_BLOOM_BITS) -> int:
    """The package's ``hashN(item, n, maxValue)``."""
    a = abs(_nim_hash(item)) % max_value
    b = abs(_nim_hash(item + " b")) % max_value
    return abs(a + n * b) % max_value


def waku_bloom_indices(message_id: str, params: BloomParams = WAKU_BLOOM) -> tuple[int, ...]:
    """Positions in our (big-endian bit order) filter of the package's bits for an id."""
    a = abs(_nim_hash(message_id)) % WAKU_BLOOM_BITS
    b = abs(_nim_hash(message_id + " b")) % WAKU_BLOOM_BITS
    out = []
    for i in range(params.hashes):
        h = (a + i * b) % WAKU_BLOOM_BITS
        out.append((h & ~63) | (63 - (h & 63)))
    return tuple(out)


def waku_repair_hash(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("".join(parts).encode()).digest()[:8], "big")
