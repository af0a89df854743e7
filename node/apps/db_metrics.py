"""The replicated database's metric series, and which series a count of a batch goes to."""

from __future__ import annotations

__all__ = ["METRICS", "metric_of"]

# name -> help, all counters; labelled ones carry a ``reason`` or an ``outcome``.
METRICS = {
    "db_rejected_total": "CRDT messages rejected (reason: malformed, unknown_table, "
                         "unknown_column, bad_type, unauthorised_writer); they stay in the log",
    "db_schema_declarations_total": "Schema declarations applied (outcome: changed, rescan, "
                                    "duplicate, not_owner, not_declarer, too_many_versions, "
                                    "too_many_tables, takeover: a late declaration that "
                                    "would have taken a settled or pinned table over)",
    "db_tables_reevaluated_total": "Tables re-derived from the log after their versions changed",
    "db_messages_reevaluated_total": "Writes judged again while re-deriving a table",
    "db_tombstones_compacted_total": "Tombstones forgotten after the stability window",
    "db_cells_set_total": "Column registers that took a new winning write",
    "db_records_created_total": "Records created or re-created by an upsert",
    "db_records_deleted_total": "Visible records removed by a delete",
    "db_tombstones_total": "Deletes that advanced a record's tombstone",
    "db_upserts_noted_total": "Upserts that advanced the version of an existing record",
}


def metric_of(count_name: str) -> tuple[str, dict[str, str]]:
    """(metric, labels) of a count key."""
    if count_name.startswith("rejected_"):
        return "db_rejected_total", {"reason": count_name.removeprefix("rejected_")}
    if count_name.startswith("schema_"):
        return "db_schema_declarations_total", {"outcome": count_name.removeprefix("schema_")}
    return f"db_{count_name}_total", {}
