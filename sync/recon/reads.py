"""Key-store reads as an action and an input: the Recon key store never reads keys, it asks.

A :class:`~sync.recon.summary.SummaryKeyStore` answers a session's queries from its summary,
its bucket cache and the answers given for the step being run. A read it has no answer for is
recorded, not made (``SummaryKeyStore.misses`` grows: what that query returned is void). The
session's step then waits where it asked: it returns the action :class:`ReadKeys` (the
:class:`KeyReads` it must have) instead of a reply, the driver makes those reads with its
:class:`KeyReader` (SQL in the node, outside the step: :func:`read_keys`) and feeds them back as
the input :class:`KeysRead` (``ReconSession.keys_read``), and the step goes on from there:
nothing is undone or done again but the query that lacked. A step asks for the reads of many
ranges in one round: a message's range hashes and listed keys first, in one batch, then the
reads of every range whose handling waits (a split's ranks, its successors, its hashes: each
read depends on the one before). Most steps ask none (a session reads buckets it has just
cached). The bucket splits after an insert ask the same way (:func:`insert_keys` is the
driver's loop for them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sync.errors import LocalProtocolError

__all__ = ["KeyReader", "KeyReads", "KeysRead", "RangeRead", "ReadKeys", "answered",
           "carry_out_reads", "insert_keys", "read_keys"]

T = TypeVar("T")
A = TypeVar("A")  # a step's action (``sync.actions.Action``, which imports this module)

#: Rounds of answers one query may ask for (a rank's bucket once its range's start is known: a
#: few); the bound turns a bug into an error, not a hang.
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
    """Action: the step waits where it must have ``reads`` answered (``KeysRead``)."""

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


def carry_out_reads(actions: list[A], reader: KeyReader,
                    keys_read: Callable[[KeysRead], list[A]]) -> list[A]:
    """The driver's side of a session's step: while its actions are a ``ReadKeys`` (the step
    waits for them), make the reads with ``reader`` and feed the answer back (``keys_read``:
    the session's input, ``ReplicationCore.keys_read``); the step's actions once it ran
    through. The session bounds the rounds one read may take (:data:`MAX_ROUNDS`)."""
    while actions and isinstance(read := actions[0], ReadKeys):
        actions = keys_read(read_keys(reader, read.reads))
    return actions


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
    """Make ``query`` (a call into the store), again once the reads it asked for are answered
    from ``reader``, until it asks no more: what a session does for each query of a step. For
    tests, benchmarks and tools that query a store outside a Recon session."""
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
