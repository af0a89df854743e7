"""The database schema: one ``MetaData`` with every table, each column commented.

Migrations under ``storage/migrations`` must produce exactly this schema (a test compares them).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
)

__all__ = ["LANE_COLUMNS", "events", "metadata", "node_state"]

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

