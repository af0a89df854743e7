"""Key-store reads as an action and an input: a Recon step never calls its key source, it asks.

A :class:`~sync.recon.summary.SummaryKeyStore` in asking mode (``asks = True``) answers a
session's queries from its summary, its bucket cache and the answers given for the step being
run. A read it has no answer for is recorded, not made; the session then undoes the step and
returns the action :class:`ReadKeys` (the :class:`KeyReads` it must have) instead of a reply.
The driver makes those reads (SQL in the node, outside the step: :func:`read_keys`) and feeds
them back as the input :class:`KeysRead` (``ReconSession.keys_read``), which runs the held step
with them. Each answer settles at least one more read, so a step settles after a few (most
after none: a session reads buckets it has just cached).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["KeyReads", "KeysRead", "RangeRead", "ReadKeys", "read_keys"]

#: One ascending range read: up to ``limit`` keys of ``[lo, hi)`` (``hi`` None: to the end).
RangeRead = tuple[bytes, bytes | None, int]


@dataclass(frozen=True)
class KeyReads:
    """What a step must read before it can run: range reads, and which keys are held."""

    ranges: tuple[RangeRead, ...]
    present: tuple[bytes, ...]


@dataclass(frozen=True)
class ReadKeys:
    """Action: the step did nothing and must have ``reads`` answered first."""

    reads: KeyReads


@dataclass(frozen=True)
class KeysRead:
    """Input: the answers to ``reads`` (``keys`` in the order of ``reads.ranges``; ``held``:
    those of ``reads.present`` the log holds)."""

    reads: KeyReads
    keys: list[list[bytes]]
    held: set[bytes]


class _Source(Protocol):
    def present(self, keys: Sequence[bytes]) -> set[bytes]: ...

    def keys(self, lo: bytes, hi: bytes | None, limit: int) -> list[bytes]: ...


def read_keys(source: _Source, reads: KeyReads) -> KeysRead:
    """The driver's side: make ``reads`` on ``source`` (one call per range, one lookup)."""
    return KeysRead(reads, [source.keys(lo, hi, limit) for lo, hi, limit in reads.ranges],
                    source.present(reads.present) if reads.present else set())
