"""The binary Recon message: a run of adjacent ranges over the key space, each with one item.

Layout (all varints are unsigned LEB128; docs/recon.md has the full description)::

    u8 version (1) | u8 flags (1 = interests, 2 = more) | u8 fingerprint length
    [varint n, n x (bytes lo, bytes hi)]   # interests, when flag 1; bytes = varint len + data
    varint item count
    bound0, then per item: u8 kind, body, bound    # item i covers [bound_i, bound_i+1)

A bound is written against the previous one as ``varint shared, varint suffix length, suffix``,
bounds strictly increase, and are usually the shortest prefix that separates two adjacent keys.
Kinds: SKIP (no body: nothing to say about the range), HASH (varint count, truncated Sha256a),
KEYS (varint n, n keys written like bounds against the previous key, the first against the range
start: "these are all my keys here"), DIFF (an answer to KEYS: the same key list, "keys here that
you lack", then bytes: a bitmap over the keys you listed inside this range, bit i (LSB first) set
when I lack your i-th key).
"""

from __future__ import annotations

from dataclasses import dataclass

from sync.errors import ErrorKind, LocalProtocolError, RemoteProtocolError
from sync.varint import read_uvarint, uvarint

__all__ = [
    "DIFF",
    "HASH",
    "KEYS",
    "SKIP",
    "Item",
    "Limits",
    "Message",
    "MessageWriter",
    "decode_message",
    "separator",
    "shared_prefix_len",
]

VERSION = 1
FLAG_INTERESTS = 1
FLAG_MORE = 2
SKIP, HASH, KEYS, DIFF = 0, 1, 2, 3
_MAX_COUNT = 1 << 48
_COUNT_RESERVE = 10


@dataclass(frozen=True, slots=True)
class Limits:
    """What a decoder accepts; both peers must use the same fingerprint length."""

    max_message_bytes: int = 4 << 20
    max_key_bytes: int = 256
    max_interests: int = 64
    fingerprint_bytes: int = 16
    # Ranges (items, SKIPs included) and keys (KEYS and DIFF lists) one message may carry: what
    # answering it can cost is bounded by these as much as by its bytes. Writers respect them
    # too, so an honest peer with the same limits never sends more (it sends MORE instead).
    max_items: int = 262_144
    max_keys: int = 262_144


@dataclass(frozen=True, slots=True)
class Item:
    """One non-SKIP range of a message, ``[lo, hi)``."""

    kind: int
    lo: bytes
    hi: bytes
    count: int = 0
    fingerprint: bytes = b""
    keys: tuple[bytes, ...] = ()
    lacking: bytes = b""


@dataclass(frozen=True, slots=True)
class Message:
    interests: tuple[tuple[bytes, bytes], ...] | None
    more: bool
    items: tuple[Item, ...]
    #: Ranges the message carried, SKIPs included (``items`` holds the others).
    ranges: int = 0

    @property
    def demanding(self) -> bool:
        """Whether the peer must answer (a HASH or KEYS item, or more to come)."""
        return self.more or any(item.kind in (HASH, KEYS) for item in self.items)


def shared_prefix_len(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def separator(below: bytes, key: bytes) -> bytes:
    """The shortest prefix ``s`` of ``key`` with ``below < s <= key`` (requires below < key)."""
    return key[: shared_prefix_len(below, key) + 1]


def _delta(prev: bytes, value: bytes) -> bytes:
    shared = shared_prefix_len(prev, value)
    suffix = value[shared:]
    if shared < 0x80 and len(suffix) < 0x80:
        return bytes((shared, len(suffix))) + suffix
    return uvarint(shared) + uvarint(len(suffix)) + suffix


class MessageWriter:
    """Builds one message within the size limit; ``try_*`` return False when an item won't fit."""

    def __init__(
        self,
        limits: Limits,
        interests: tuple[tuple[bytes, bytes], ...] | None = None,
    ) -> None:
        head = bytearray((VERSION, 0, limits.fingerprint_bytes))
        if interests is not None:
            head[1] |= FLAG_INTERESTS
            head += uvarint(len(interests))
            for lo, hi in interests:
                head += uvarint(len(lo)) + lo + uvarint(len(hi)) + hi
        self._head = head
        self._body = bytearray()
        self._limit = limits.max_message_bytes - _COUNT_RESERVE
        self._fp_len = limits.fingerprint_bytes
        # Room kept for the varint count rewrite and a cut bound as long as the longest key.
        self._slack = 12 + limits.max_key_bytes
        self._bound: bytes | None = None
        self._max_items = limits.max_items
        self._keys_left = limits.max_keys
        self.items = 0
        self.demanding = False

    def room(self) -> int:
        return self._limit - len(self._head) - len(self._body)

    def _open(self, lo: bytes) -> tuple[bytes, int]:
        """Bytes (and item count) that move the cursor to ``lo``: the first bound or a SKIP."""
        if self._bound is None:
            return _delta(b"", lo), 0
        if lo == self._bound:
            return b"", 0
        if lo < self._bound:
            raise LocalProtocolError("message ranges out of order")
        return b"\x00" + _delta(self._bound, lo), 1

    def _commit(self, chunk: bytes, hi: bytes, items: int) -> bool:
        if len(chunk) > self.room() or self.items + items > self._max_items:
            return False
        self._body += chunk
        self._bound = hi
        self.items += items
        return True

    def try_hash(self, lo: bytes, hi: bytes, count: int, digest: bytes) -> bool:
        opening, skips = self._open(lo)
        chunk = opening + b"\x01" + uvarint(count) + digest[: self._fp_len] + _delta(lo, hi)
        if self._commit(chunk, hi, 1 + skips):
            self.demanding = True
            return True
        return False

    def try_keys(
        self,
        kind: int,
        lo: bytes,
        hi: bytes,
        keys: list[bytes],
        listed: tuple[bytes, ...] = (),
        lacking: frozenset[bytes] = frozenset(),
    ) -> int | None:
        """Write ``keys`` (ascending, in [lo, hi)) as a KEYS or DIFF item.

        Returns how many keys were written, None when nothing was. A KEYS item is all or
        nothing. A DIFF item may be cut short: it then covers [lo, cut) where cut separates the
        last key written from the first one left, and the caller keeps [cut, hi) for later. A
        DIFF carries the bitmap of which of the peer's ``listed`` keys in its range we are
        ``lacking``.
        """
        opening, skips = self._open(lo)
        parts = [opening, bytes((kind,)), uvarint(len(keys))]
        size = sum(map(len, parts))
        room = self.room() - len(_delta(lo, hi)) - self._slack - (len(listed) + 7) // 8
        prev = lo
        written = 0
        for key in keys:
            piece = _delta(prev, key)
            if size + len(piece) > room or written >= self._keys_left:
                break
            parts.append(piece)
            size += len(piece)
            prev = key
            written += 1
        if written < len(keys):
            if kind == KEYS or written == 0:
                return None
            parts[2] = uvarint(written)
            hi = separator(keys[written - 1], keys[written])
        if kind == DIFF:
            bits = 0
            n = 0
            for key in listed:
                if lo <= key < hi:
                    if key in lacking:
                        bits |= 1 << n
                    n += 1
            bitmap = bits.to_bytes((n + 7) // 8, "little")
            parts.append(uvarint(len(bitmap)) + bitmap)
        parts.append(_delta(lo, hi))
        if not self._commit(b"".join(parts), hi, 1 + skips):
            return None
        self._keys_left -= written
        if kind == KEYS:
            self.demanding = True
        return written

    def finish(self, more: bool) -> bytes:
        if more:
            self._head[1] |= FLAG_MORE
        return bytes(self._head) + uvarint(self.items) + self._body


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise RemoteProtocolError("message truncated")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        data, pos = self.data, self.pos
        if pos < len(data) and data[pos] < 0x80:  # the common one-byte case, inline
            self.pos = pos + 1
            return data[pos]
        value, self.pos = read_uvarint(data, pos)
        return value

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise RemoteProtocolError("message truncated")
        out = self.data[self.pos : end]
        self.pos = end
        return out

    def delta(self, prev: bytes, max_len: int) -> bytes:
        data, pos = self.data, self.pos
        if pos + 1 < len(data) and data[pos] < 0x80 and data[pos + 1] < 0x80:
            shared, end = data[pos], pos + 2 + data[pos + 1]
            if shared > len(prev) or end - pos - 2 + shared > max_len or end > len(data):
                raise RemoteProtocolError("bad prefix-compressed value")
            self.pos = end
            return prev[:shared] + data[pos + 2 : end]
        shared = self.varint()
        size = self.varint()
        if shared > len(prev) or shared + size > max_len:
            raise RemoteProtocolError("bad prefix-compressed value")
        return prev[:shared] + self.take(size)


def decode_message(data: bytes, limits: Limits) -> Message:
    """Parse and check a message; anything malformed raises ``RemoteProtocolError`` only."""
    if len(data) > limits.max_message_bytes:
        raise RemoteProtocolError("message too large", kind=ErrorKind.OVER_LIMIT)
    r = _Reader(data)
    if r.byte() != VERSION:
        raise RemoteProtocolError("unknown message version")
    flags = r.byte()
    if flags & ~(FLAG_INTERESTS | FLAG_MORE):
        raise RemoteProtocolError("unknown message flags")
    if r.byte() != limits.fingerprint_bytes:
        raise RemoteProtocolError("fingerprint length mismatch")
    max_key = limits.max_key_bytes
    interests: tuple[tuple[bytes, bytes], ...] | None = None
    if flags & FLAG_INTERESTS:
        n = r.varint()
        if n > limits.max_interests:
            raise RemoteProtocolError("too many interests", kind=ErrorKind.OVER_LIMIT)
        pairs = []
        prev_hi = b""
        for _ in range(n):
            lo_len = r.varint()
            lo = r.take(lo_len) if lo_len <= max_key else b""
            hi_len = r.varint()
            hi = r.take(hi_len) if hi_len <= max_key else b""
            if lo_len > max_key or hi_len > max_key or not prev_hi <= lo < hi:
                raise RemoteProtocolError("bad interest range")
            pairs.append((lo, hi))
            prev_hi = hi
        interests = tuple(pairs)
    count = r.varint()
    if count > len(data):
        raise RemoteProtocolError("item count exceeds message size", kind=ErrorKind.OVER_LIMIT)
    if count > limits.max_items:
        raise RemoteProtocolError("more ranges than a message may carry", kind=ErrorKind.OVER_LIMIT)
    keys_left = limits.max_keys
    items: list[Item] = []
    fp_len = limits.fingerprint_bytes
    lo = r.delta(b"", max_key) if count else b""
    for _ in range(count):
        kind = r.byte()
        n = 0
        fingerprint = b""
        keys: list[bytes] = []
        lacking = b""
        if kind == HASH:
            n = r.varint()
            if n > _MAX_COUNT:
                raise RemoteProtocolError("range count too large", kind=ErrorKind.OVER_LIMIT)
            fingerprint = r.take(fp_len)
        elif kind in (KEYS, DIFF):
            size = r.varint()
            if size > len(data):
                raise RemoteProtocolError("key count exceeds message size",
                                          kind=ErrorKind.OVER_LIMIT)
            keys_left -= size
            if keys_left < 0:
                raise RemoteProtocolError("more keys than a message may carry",
                                          kind=ErrorKind.OVER_LIMIT)
            prev = lo
            for i in range(size):
                key = r.delta(prev, max_key)
                if (key < prev) if i == 0 else (key <= prev):
                    raise RemoteProtocolError("keys out of order")
                keys.append(key)
                prev = key
            if kind == DIFF:
                lacking = r.take(r.varint())
        elif kind != SKIP:
            raise RemoteProtocolError("unknown item kind")
        hi = r.delta(lo, max_key)
        if not lo < hi:
            raise RemoteProtocolError("bounds out of order")
        if kind != SKIP:
            if keys and keys[-1] >= hi:
                raise RemoteProtocolError("key outside its range")
            items.append(Item(kind, lo, hi, n, fingerprint, tuple(keys), lacking))
        lo = hi
    if r.pos != len(data):
        raise RemoteProtocolError("trailing bytes after message")
    return Message(interests, bool(flags & FLAG_MORE), tuple(items), count)
