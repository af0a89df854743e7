"""What the event store reports to the replication driver: typed records, pulled, not callbacks.

Every record the store takes is reported once as :class:`Queued` when it enters the queue, then
once as :class:`Committed` (in the commit's batch: what was new) or, when no backend could store
it, as :class:`Failed` before that batch's ``Committed``. The store only appends to its report
channel (``EventStore.reports``); the driver reads it and feeds the cores (a Recon claim is held
from ``Queued`` to ``Committed``, a key enters the key store with its ``Committed``, an SDS
delivery is undone on ``Failed``). Nothing is registered into the store, so nothing it does
calls back into a core.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from storage import AppendResult, EventRecord

__all__ = ["Committed", "Failed", "Queued", "StoreReport"]


@dataclass(frozen=True)
class Queued:
    """``records`` entered the store's queue."""

    records: Sequence[EventRecord]


@dataclass(frozen=True)
class Committed:
    """A commit of ``records``; ``result``: those that were new (and the duplicates)."""

    result: AppendResult
    records: Sequence[EventRecord]


@dataclass(frozen=True)
class Failed:
    """``records`` could not be stored (their batch's ``Committed`` follows)."""

    records: Sequence[EventRecord]


StoreReport = Queued | Committed | Failed
