"""A batch append that isolates the events a transaction cannot take (ingest workers' path).

The daemon's ``EventStore`` commits batches and, when one fails as a whole, retries its
events one transaction each; an ingest worker appending a fetched batch (docs/bench/cluster.md,
"the ingest worker as writer") needs the same behaviour without trio, so it lives here.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Engine

from storage.engine import write_transaction
from storage.events import AppendResult, EventRecord, append_events

__all__ = ["append_isolating"]


def append_isolating(
    engine: Engine, records: Sequence[EventRecord], received_at: int
) -> tuple[AppendResult, dict[str, str]]:
    """Append ``records`` in one transaction, in the order given; if it fails, once more one
    transaction per record. Returns what was stored and, per message id, why it could not be
    (a full disk or a lost database fails every record, and all are reported)."""
    try:
        with write_transaction(engine) as conn:
            return append_events(conn, records, received_at), {}
    except Exception as exc:
        if len(records) == 1:
            return AppendResult((), ()), {records[0].message_id: _why(exc)}
    inserted: list[tuple[int, str]] = []
    duplicates: list[str] = []
    rejected: list[tuple[str, str]] = []
    errors: dict[str, str] = {}
    for record in records:
        try:
            with write_transaction(engine) as conn:
                result = append_events(conn, [record], received_at)
        except Exception as exc:
            errors[record.message_id] = _why(exc)
            continue
        inserted.extend(result.inserted)
        duplicates.extend(result.duplicates)
        rejected.extend(result.rejected)
    return AppendResult(tuple(inserted), tuple(duplicates), tuple(rejected)), errors


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]
