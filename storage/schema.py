"""The database schema: one ``MetaData`` with every table, each column commented.

Migrations under ``storage/migrations`` must produce exactly this schema (a test compares them).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)

__all__ = [
    "LANE_COLUMNS",
    "block_head",
    "block_log",
    "blocks",
    "crdt_cells",
    "crdt_changes",
    "crdt_entities",
    "crdt_schemas",
    "events",
    "metadata",
    "node_state",
    "recon_summary",
]

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# SQLite only makes INTEGER PRIMARY KEY an auto-incrementing rowid alias, not BIGINT.
_Seq = BigInteger().with_variant(Integer(), "sqlite")

LANE_COLUMNS = tuple(f"lane{i}" for i in range(8))

events = Table(
    "events",
    metadata,
    Column("seq", _Seq, primary_key=True, autoincrement=True,
           comment="Local insertion order; cursor for readers and partition column for Spark"),
    Column("recon_key", LargeBinary(256), nullable=False, unique=True,
           comment="CIP-124 eventId of the event: the Recon sort key"),
    Column("message_id", String(64), nullable=False, unique=True,
           comment="SDS message id: hex sha256 of the event's stable fields"),
    Column("channel", String(128), nullable=False, comment="SDS channel id"),
    Column("sender", String(128), nullable=False, comment="Sender's libp2p peer id"),
    Column("lamport", BigInteger, nullable=False,
           comment="Sender's Lamport timestamp (uint64, < 2^63 in practice: epoch ms based)"),
    Column("wire", LargeBinary, nullable=False,
           comment="Signed canonical SDS message bytes, exactly as validated"),
    *(
        Column(name, BigInteger, nullable=False,
               comment=f"Sha256a lane {i}: little-endian u32 {i} of sha256(recon_key)")
        for i, name in enumerate(LANE_COLUMNS)
    ),
    Column("received_at", BigInteger, nullable=False,
           comment="Epoch milliseconds when this node stored the event"),
    comment="The replicated append-only event log",
)
Index("ix_events_channel_seq", events.c.channel, events.c.seq)
Index("ix_events_channel_lamport", events.c.channel, events.c.lamport, events.c.message_id)

node_state = Table(
    "node_state",
    metadata,
    Column("key", String(200), primary_key=True, comment="State entry name, e.g. sds/<channel>"),
    Column("value", LargeBinary, nullable=False, comment="Opaque serialized state"),
    Column("updated_at", BigInteger, nullable=False, comment="Epoch milliseconds of last write"),
    comment="Small key/value store for node state (clocks, buffers, known peers)",
)


# -- block streams (migration 0002) -------------------------------------------------------------

_STREAM_COMMENT = "Block stream: the blocks application's default channel"

blocks = Table(
    "blocks",
    metadata,
    Column("stream", String(128), primary_key=True, comment=_STREAM_COMMENT),
    Column("hash", LargeBinary(32), primary_key=True, comment="32-byte block hash"),
    Column("number", BigInteger, nullable=False, comment="Block number"),
    Column("parent", LargeBinary(32), nullable=False,
           comment="Parent block hash (all zeros for a first block)"),
    Column("weight", String(80), nullable=False,
           comment="Chain weight as a decimal string (up to 2^256-1)"),
    Column("canonical", Boolean, nullable=False,
           comment="True while the block is on this node's canonical chain"),
    Column("payload", Text, nullable=False,
           comment="Block payload in the JSONL format of docs/cardinal.md (tracked parts)"),
    Column("applied_at", BigInteger, nullable=False,
           comment="Epoch milliseconds when the block was last applied or reverted"),
    comment="Completed Cardinal Streams blocks this node applied (reverted ones kept)",
)
Index("ix_blocks_stream_number", blocks.c.stream, blocks.c.number)

block_head = Table(
    "block_head",
    metadata,
    Column("stream", String(128), primary_key=True, comment=_STREAM_COMMENT),
    Column("hash", LargeBinary(32), nullable=False, comment="Head block hash"),
    Column("number", BigInteger, nullable=False, comment="Head block number"),
    Column("weight", String(80), nullable=False, comment="Head weight as a decimal string"),
    Column("updated_at", BigInteger, nullable=False,
           comment="Epoch milliseconds of the last head change"),
    comment="Current canonical head of each block stream",
)

block_log = Table(
    "block_log",
    metadata,
    Column("seq", _Seq, primary_key=True, autoincrement=True,
           comment="Order of head changes; cursor for `syncnode blocks follow`"),
    Column("stream", String(128), nullable=False, comment=_STREAM_COMMENT),
    Column("kind", String(16), nullable=False, comment="applied or reverted"),
    Column("hash", LargeBinary(32), nullable=False, comment="Block hash"),
    Column("number", BigInteger, nullable=False, comment="Block number"),
    Column("at", BigInteger, nullable=False, comment="Epoch milliseconds of the change"),
    comment="Applied and reverted blocks in the order this node saw them",
)
Index("ix_block_log_stream_seq", block_log.c.stream, block_log.c.seq)


# -- replicated database, the Spindexer CRDT (migration 0003) -----------------------------------

_CRDT_TABLE = "Replicated table name, as declared in db.tables"
_CRDT_ENTITY = "Entity id: the row key of the replicated table"

crdt_entities = Table(
    "crdt_entities",
    metadata,
    Column("table_name", String(64), primary_key=True, comment=_CRDT_TABLE),
    Column("entity_id", String(512), primary_key=True, comment=_CRDT_ENTITY),
    Column("upserted_lamport", BigInteger, nullable=True,
           comment="Lamport timestamp of the greatest upsert seen (NULL: none yet)"),
    Column("upserted_by", String(128), nullable=True,
           comment="Sender peer id of that upsert (the version's tie-break)"),
    Column("deleted_lamport", BigInteger, nullable=True,
           comment="Tombstone: Lamport timestamp of the greatest delete seen (NULL: none)"),
    Column("deleted_by", String(128), nullable=True, comment="Sender peer id of that delete"),
    Column("alive", Boolean, nullable=False,
           comment="The row is visible: an upsert is newer than every delete"),
    comment="Per-record versions of the replicated tables (upsert version and tombstone)",
)

crdt_cells = Table(
    "crdt_cells",
    metadata,
    Column("table_name", String(64), primary_key=True, comment=_CRDT_TABLE),
    Column("entity_id", String(512), primary_key=True, comment=_CRDT_ENTITY),
    Column("column_name", String(64), primary_key=True, comment="Replicated column name"),
    Column("lamport", BigInteger, nullable=False,
           comment="Lamport timestamp of the winning write (newer than the tombstone)"),
    Column("sender", String(128), nullable=False, comment="Peer id that made the winning write"),
    Column("value", Text, nullable=False,
           comment="The winning value as canonical JSON text (null for SQL NULL)"),
    comment="LWW register of every written column: the cells of the replicated tables",
)

# Partial (migration 0005): only tombstones are looked up, and records without one then cost
# no index write.
_TOMBSTONED = crdt_entities.c.deleted_lamport.isnot(None)
Index("ix_crdt_entities_deleted", crdt_entities.c.table_name, crdt_entities.c.deleted_lamport,
      sqlite_where=_TOMBSTONED, postgresql_where=_TOMBSTONED)

# migration 0004: schemas declared on the log (the mempool table of 0003 is gone)
crdt_schemas = Table(
    "crdt_schemas",
    metadata,
    Column("table_name", String(64), primary_key=True, comment=_CRDT_TABLE),
    Column("lamport", BigInteger, primary_key=True,
           comment="Lamport timestamp of the declaring event"),
    Column("sender", String(128), primary_key=True, comment="Peer id that signed it"),
    Column("digest", String(64), primary_key=True,
           comment="Hex sha256 of the declaration bytes: tells apart declarations of one time"),
    Column("declaration", LargeBinary, nullable=False,
           comment="The canonical declaration (docs/crdt.md, Schemas on the log)"),
    comment="Schema declarations that count for a replicated table (its owner's versions)",
)

# migration 0006: the Recon key store's summary, saved so a restart need not rescan every key
recon_summary = Table(
    "recon_summary",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False, comment="Always 1: one row"),
    Column("watermark", BigInteger, nullable=False,
           comment="Highest events.seq whose key the summary holds (it holds exactly those)"),
    Column("watermark_key", LargeBinary(256), nullable=True,
           comment="recon_key of the event at the watermark (None for an empty log): a log "
                   "replaced since the save no longer has it there"),
    Column("total", BigInteger, nullable=False, comment="Keys the summary holds"),
    Column("summary", LargeBinary, nullable=False,
           comment="Bucket boundaries, counts and hash sums (sync.recon.summary_codec)"),
    Column("saved_at", BigInteger, nullable=False, comment="Epoch milliseconds of the save"),
    comment="The Recon key store's bucket summary at a watermark (docs/architecture.md)",
)

# migration 0007: the change feed of the replicated tables (GET /v1/db/{table}/changes)
crdt_changes = Table(
    "crdt_changes",
    metadata,
    Column("change_id", _Seq, primary_key=True, autoincrement=True,
           comment="Change id: increases with every change, never reused (a subscriber's "
                   "resume cursor, ?since=)"),
    Column("table_name", String(64), nullable=False, comment=_CRDT_TABLE),
    Column("entity_id", String(512), nullable=True, comment=_CRDT_ENTITY + " (NULL: reset)"),
    Column("kind", String(16), nullable=False,
           comment="upsert (visible with these values), delete (no longer visible) or reset "
                   "(the table was re-derived: read it again)"),
    Column("row_values", Text, nullable=True,
           comment="upsert: the visible row as canonical JSON (every declared column)"),
    Column("lamport", BigInteger, nullable=False,
           comment="Lamport timestamp of the last write that made the change"),
    Column("sender", String(128), nullable=False, comment="Peer id of that write's signer"),
    Column("at", BigInteger, nullable=False,
           comment="Epoch milliseconds when this node applied it"),
    comment="Row changes of the replicated tables, newest db.changes_retain kept",
    sqlite_autoincrement=True,
)
Index("ix_crdt_changes_table_name_change_id", crdt_changes.c.table_name, crdt_changes.c.change_id)
