"""The table owners a node settled (``sync.crdt.SchemaBook.settled``) and when it first saw each
table (``seen``), kept in the node state so that a restart judges claims as the live run did
(docs/crdt.md "Settled owners")."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from sqlalchemy import Connection

from storage import get_state, put_state
from sync.crdt import SchemaBook, SchemaDeclaration

__all__ = ["OWNERS_KEY", "restore_owners", "save_owners"]

OWNERS_KEY = "app/db/owners"


def _owners_json(book: SchemaBook) -> str:
    return json.dumps({"settled": book.settled, "seen": book.seen}, sort_keys=True)


def restore_owners(conn: Connection, book: SchemaBook,
                   stored: Mapping[str, Sequence[SchemaDeclaration]]) -> None:
    """Put the persisted owners into ``book`` (filled from ``stored`` declarations)."""
    raw = get_state(conn, OWNERS_KEY)
    if raw:
        learned = json.loads(raw)
        book.settled.update({str(k): str(v) for k, v in learned["settled"].items()})
        book.seen.update({str(k): int(v) for k, v in learned["seen"].items()})
        for table in book.settled:  # the history as settled (a pin filters the owner)
            book.reset_table(table, stored.get(table, ()))
    for table in book.tables():
        # Known before this release kept first-seen times (or before a lost state): known
        # for long, so its owner settles at the next declaration, not settle_ms after it.
        book.seen.setdefault(table, 0)


def save_owners(conn: Connection, before: SchemaBook, after: SchemaBook, now_ms: int) -> None:
    """Persist ``after``'s owners if a batch changed them."""
    if _owners_json(after) != _owners_json(before):
        put_state(conn, OWNERS_KEY, _owners_json(after).encode(), now_ms)
