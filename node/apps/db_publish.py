"""Writing to the db channel: publish an event and answer once it is committed and applied;
declaring the tables of ``db.tables`` that the log does not have yet.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from node.apps.db_app import DbApplication
from node.apps.db_log import channel_max_seq
from storage import events_by_message_ids
from sync.crdt import SchemaDeclaration

if TYPE_CHECKING:
    from node.apps.runner import AppHost

__all__ = ["WRITE_WAIT_S", "SchemaSeeder", "publish_and_wait"]

log = logging.getLogger("syncnode.db")

# How long a write's answer waits for the application to apply it (then "applied": false).
WRITE_WAIT_S = 10.0


async def publish_and_wait(db: DbApplication, node: AppHost,
                           content: bytes) -> dict[str, Any]:
    """Publish ``content`` on the db channel; answer once it is committed and applied (or
    after ``WRITE_WAIT_S`` with ``applied: false``)."""
    delivered = await node.require_channels().publish(db.section.channel, content)
    found = await node.store.read(events_by_message_ids, [delivered.message_id])
    seq = found[0].seq if found else 0
    with trio.move_on_after(WRITE_WAIT_S):
        while db.applied_seq < seq:
            await db.change_signal().wait()
    return {"message_id": delivered.message_id, "lamport": delivered.lamport, "seq": seq,
            "applied": db.applied_seq >= seq}


class SchemaSeeder:
    """Declares the tables of ``db.tables`` that the log does not have yet, once the node has
    applied what its log held at start (a pinned table only if this node is its owner);
    backdated to Lamport 0 when the log holds writes to the table from before schemas were on
    the log (migration 0004 keeps where those end)."""

    def __init__(self, db: DbApplication, runtime: Any) -> None:
        self.db = db
        self.runtime = runtime
        self.published: list[str] = []

    async def run(self) -> None:
        db, node = self.db, self.runtime
        target = await node.store.read(channel_max_seq, db.section.channel)
        while db.applied_seq < target:
            with trio.move_on_after(1.0):
                await db.change_signal().wait()
        pins = db.section.owner_pins()
        for name, schema in sorted(db.seeds.items()):
            if name in db.book or pins.get(name, node.peer_id) != node.peer_id or (
                    db.section.declarers and node.peer_id not in db.section.declarers):
                continue
            # Writes to it stored before schemas were on the log (an upgraded database): the
            # seed is backdated to Lamport 0 so that they count again, judged by this config
            # as they were (docs/crdt.md, Upgrading).
            legacy = await node.store.read(db.has_legacy_writes, name)
            if legacy:
                log.info("table has writes from before schemas were on the log; declaring it "
                         "since Lamport 0, then re-deriving it from the log",
                         extra={"table": name})
            declaration = SchemaDeclaration(name, schema.columns, schema.writers,
                                            sender=node.peer_id, backdated=legacy)
            try:
                await publish_and_wait(db, node, declaration.encoded)
            except Exception:  # the node keeps running; the table can be declared by hand
                log.exception("could not declare table from config", extra={"table": name})
                continue
            self.published.append(name)
            log.info("declared table from config", extra={"table": name})
        await trio.sleep_forever()
