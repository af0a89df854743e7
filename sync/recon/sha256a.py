"""Sha256a: the associative hash of CIP-124.

Each element is hashed with sha256 and read as 8 little-endian u32 lanes; a set's hash is the
lane-wise sum mod 2^32. Sums of disjoint ranges therefore add up to the hash of their union,
which is what lets a range hash be answered from prefix sums or from SQL ``SUM``.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["LANES", "MASK32", "Sha256a", "digest_of_wide", "lanes_of", "wide_of"]

LANES = 8
MASK32 = 0xFFFFFFFF
_LANE_FMT = struct.Struct("<8I")
# Masks that move the 32-bit lanes of a 256-bit integer into 64-bit slots in three steps.
_SPREAD_128 = sum(((1 << 128) - 1) << (256 * i) for i in range(2))
_SPREAD_64 = sum(((1 << 64) - 1) << (128 * i) for i in range(4))
_SPREAD_32 = sum(((1 << 32) - 1) << (64 * i) for i in range(8))
_LOW_256 = (1 << 256) - 1
_WIDE_READ = struct.Struct("<16I")


def lanes_of(element: bytes) -> tuple[int, int, int, int, int, int, int, int]:
    """The 8 little-endian u32 lanes of sha256(element)."""
    return _LANE_FMT.unpack(hashlib.sha256(element).digest())


def wide_of(element: bytes) -> int:
    """The lanes of sha256(element) as one integer with a 64-bit slot per lane.

    Summing wide values never carries from one slot into the next for fewer than 2^32 elements,
    so a range hash is one big-integer subtraction of two prefix sums instead of eight masked
    additions per element: this is what keeps the in-memory store fast in pure Python.
    """
    x = int.from_bytes(hashlib.sha256(element).digest(), "little")
    x = (x | (x << 128)) & _SPREAD_128
    x = (x | (x << 64)) & _SPREAD_64
    return (x | (x << 32)) & _SPREAD_32


def digest_of_wide(wide: int) -> bytes:
    """The 32-byte Sha256a digest of a non-negative sum of :func:`wide_of` values."""
    x = wide & _SPREAD_32
    x = (x | (x >> 32)) & _SPREAD_64
    x = (x | (x >> 64)) & _SPREAD_128
    return ((x | (x >> 128)) & _LOW_256).to_bytes(32, "little")


@dataclass(frozen=True, slots=True)
class Sha256a:
    """An associative hash value with the number of elements it covers."""

    lanes: tuple[int, ...] = (0,) * LANES
    count: int = 0

    @classmethod
    def of(cls, elements: Iterable[bytes]) -> Sha256a:
        acc = [0] * LANES
        count = 0
        for element in elements:
            for i, lane in enumerate(lanes_of(element)):
                acc[i] += lane
            count += 1
        return cls(tuple(v & MASK32 for v in acc), count)

    @classmethod
    def from_bytes(cls, digest: bytes, count: int) -> Sha256a:
        return cls(_LANE_FMT.unpack(digest), count)

    @classmethod
    def from_wide(cls, wide: int, count: int) -> Sha256a:
        """From a non-negative sum of :func:`wide_of` values (each slot reduced mod 2^32)."""
        return cls(_WIDE_READ.unpack(wide.to_bytes(64, "little"))[0::2], count)

    def __add__(self, other: Sha256a) -> Sha256a:
        return Sha256a(
            tuple((a + b) & MASK32 for a, b in zip(self.lanes, other.lanes, strict=True)),
            self.count + other.count,
        )

    def __sub__(self, other: Sha256a) -> Sha256a:
        return Sha256a(
            tuple((a - b) & MASK32 for a, b in zip(self.lanes, other.lanes, strict=True)),
            self.count - other.count,
        )

    def digest(self) -> bytes:
        return _LANE_FMT.pack(*self.lanes)

    def hex(self) -> str:
        return self.digest().hex()
