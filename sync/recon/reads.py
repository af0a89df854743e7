"""Key-store reads as requests: a Recon step never calls its key source, it asks.

A :class:`~sync.recon.summary.SummaryKeyStore` in asking mode (``asks = True``) answers a
session's queries from its summary, its bucket cache and the answers given for the step being
run. A read it has no answer for is recorded, not made; the session then undoes the step and
raises :class:`KeysNeeded` with the :class:`KeyReads` it must have. The driver makes those reads
(SQL in the node, outside the step), hands them to ``SummaryKeyStore.answer`` and runs the same
step again. Each run answers at least one more read, so a step settles after a few runs (most
steps after one: a session reads buckets it has just cached).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["KeyReads", "KeysNeeded", "RangeRead", "read_keys"]

#: One ascending range read: up to ``limit`` keys of ``[lo, hi)`` (``hi`` None: to the end).
RangeRead = tuple[bytes, bytes | None, int]


@dataclass(frozen=True)
class KeyReads:
    """What a step must read before it can run: range reads, and which keys are held."""

    ranges: tuple[RangeRead, ...]
    present: tuple[bytes, ...]


class KeysNeeded(Exception):
    """Raised by a session step (undone) that needs ``reads`` answered first."""

    def __init__(self, reads: KeyReads) -> None:
        super().__init__(f"{len(reads.ranges)} range reads, {len(reads.present)} lookups")
        self.reads = reads


class _Source(Protocol):
    def present(self, keys: Sequence[bytes]) -> set[bytes]: ...

    def keys(self, lo: bytes, hi: bytes | None, limit: int) -> list[bytes]: ...


def read_keys(source: _Source, reads: KeyReads) -> tuple[list[list[bytes]], set[bytes]]:
    """The driver's side: make ``reads`` on ``source`` (one call per range, one lookup)."""
    return ([source.keys(lo, hi, limit) for lo, hi, limit in reads.ranges],
            source.present(reads.present) if reads.present else set())
