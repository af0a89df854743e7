"""Key-store reads as an action and an input: the Recon key store never reads keys, it asks.

A :class:`~sync.recon.summary.SummaryKeyStore` answers a session's queries from its summary,
its bucket cache and the answers given for the step being run. A read it has no answer for is
recorded, not made; the session then undoes the step and returns the action :class:`ReadKeys`
(the :class:`KeyReads` it must have) instead of a reply. The driver makes those reads with its
:class:`KeyReader` (SQL in the node, outside the step: :func:`read_keys`) and feeds them back as
the input :class:`KeysRead` (``ReconSession.keys_read``), which runs the held step with them.
Each answer settles at least one more read, so a step settles after a few (most after none: a
session reads buckets it has just cached). A session reads a message's range hashes and listed
keys in one batch before it handles any range, and stops the run there when that batch asked
for a read (``SummaryKeyStore.lacking``): the void run costs the batch only. The bucket splits
after an insert ask the same way (:func:`insert_keys` is the driver's loop for them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sync.errors import LocalProtocolError

__all__ = ["KeyReader", "KeyReads", "KeysRead", "RangeRead", "ReadKeys", "answered",
           "insert_keys", "read_keys"]

T = TypeVar("T")

#: Rounds of answers one query may ask for (a rank, then its successor: a few); the bound
#: turns a bug into an error, not a hang.
MAX_ROUNDS = 64

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


class KeyReader(Protocol):
    """The driver's reads of the log (the events table in the node): exact answers."""

    def present(self, keys: Sequence[bytes]) -> set[bytes]:
        """Those of ``keys`` the log holds."""
        ...

    def keys(self, lo: bytes, hi: bytes | None, limit: int) -> list[bytes]:
        """Up to ``limit`` keys of ``[lo, hi)`` (``hi`` None: to the end), ascending."""
        ...


class _Asking(Protocol):
    def insert_many(self, keys: Iterable[bytes]) -> int: ...

    def split_pending(self) -> None: ...

    def wanted(self) -> KeyReads | None: ...

    def answer(self, answer: KeysRead) -> None: ...

    def forget_answers(self) -> None: ...


def read_keys(reader: KeyReader, reads: KeyReads) -> KeysRead:
    """The driver's side: make ``reads`` with ``reader`` (one call per range, one lookup)."""
    return KeysRead(reads, [reader.keys(lo, hi, limit) for lo, hi, limit in reads.ranges],
                    reader.present(reads.present) if reads.present else set())


def insert_keys(store: _Asking, keys: Iterable[bytes], reader: KeyReader) -> int:
    """The driver's insert after a commit: account ``keys`` (the log holds them, the store does
    not yet), then answer the reads its bucket splits ask for until none is left; how many.

    Each answer is used by the split that asked for it at once (a split either happens or waits
    for more keys), so no read is asked twice: one that is would be a bug, an error, not a hang.
    """
    added = store.insert_many(keys)
    seen: set[RangeRead] = set()
    while (reads := store.wanted()) is not None:
        if seen.intersection(reads.ranges):
            store.forget_answers()
            raise LocalProtocolError("a bucket split asked twice for the same read")
        seen.update(reads.ranges)
        store.answer(read_keys(reader, reads))
        store.split_pending()
    return added


def answered(store: _Asking, reader: KeyReader, query: Callable[[], T]) -> T:
    """Run ``query`` (a call into the store) as a driver runs a step: again with the reads it
    asked for answered from ``reader``, until it asks no more. For tests, benchmarks and tools
    that query a store outside a Recon session (a run on missing reads is void, as a step's)."""
    for _ in range(MAX_ROUNDS):
        try:
            got = query()
        except LocalProtocolError:
            if (reads := store.wanted()) is None:
                raise
        else:
            if (reads := store.wanted()) is None:
                return got
        store.answer(read_keys(reader, reads))
    store.forget_answers()
    raise LocalProtocolError(f"a query still asked for reads after {MAX_ROUNDS} rounds")
