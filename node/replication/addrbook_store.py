"""The address book saved in the node's database (one state row, JSON), so that a restarted
node can reach the group without the peer it first joined. Records are verified again on load:
the database is not trusted to hold only what we checked."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from node.p2p.records import RecordError, open_record
from node.store.events import EventStore
from node.telemetry.logs import kv
from storage import get_state, put_state
from sync.membership import AddressBook, BookEntry

__all__ = ["load_book", "save_book"]

log = logging.getLogger("syncnode.membership")
_KEY = "membership/address_book"
_FORGOTTEN_KEY = "membership/forgotten_peers"


def _to_json(entry: BookEntry) -> dict[str, Any]:
    out = dataclasses.asdict(entry)
    out["record"] = entry.record.hex()
    return out


async def save_book(store: EventStore, book: AddressBook, now: float) -> None:
    """Save ``book`` at ``now`` (Unix seconds: the driver's ``clock.wall()``)."""
    data = json.dumps([_to_json(e) for e in book.entries.values()]).encode()
    await store.write(put_state, _KEY, data, int(now * 1000))
    forgotten = json.dumps(list(book.forgotten.items())).encode()
    await store.write(put_state, _FORGOTTEN_KEY, forgotten, int(now * 1000))


async def load_book(store: EventStore, book: AddressBook, max_record_bytes: int) -> int:
    """Restore the saved entries (and the forgotten peers) into ``book``; returns how many
    entries were kept."""
    await _load_forgotten(store, book)
    raw = await store.read(get_state, _KEY)
    if raw is None:
        return 0
    try:
        items = json.loads(raw)
        if not isinstance(items, list):
            raise ValueError("not a list")
    except ValueError as exc:
        log.warning("ignoring an unreadable saved address book", extra=kv(error=str(exc)))
        return 0
    kept = 0
    for item in items:
        try:
            entry = BookEntry(**{**item, "record": bytes.fromhex(item["record"]),
                                 "addrs": tuple(item["addrs"]),
                                 "relayed": tuple(item.get("relayed", ()))})
            if entry.record and open_record(entry.record, max_record_bytes).peer_id != \
                    entry.peer_id:
                raise RecordError("record of another peer")
        except (TypeError, KeyError, ValueError, RecordError) as exc:
            log.warning("ignoring a saved address book entry", extra=kv(error=str(exc)))
            continue
        kept += book.restore(entry)
    return kept


async def _load_forgotten(store: EventStore, book: AddressBook) -> None:
    raw = await store.read(get_state, _FORGOTTEN_KEY)
    if raw is None:
        return
    try:
        items = json.loads(raw)
        pairs = [(str(peer), float(at)) for peer, at in items]
    except (ValueError, TypeError) as exc:
        log.warning("ignoring unreadable saved forgotten peers", extra=kv(error=str(exc)))
        return
    for peer, at in pairs:
        book.forget(peer, at)
