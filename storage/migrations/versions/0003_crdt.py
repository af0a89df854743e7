"""Replicated database (Spindexer CRDT): record versions, cell registers and the mempool.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_TABLE = "Replicated table name, as declared in db.tables"
_ENTITY = "Entity id: the row key of the replicated table"


def upgrade() -> None:
    op.create_table(
        "crdt_entities",
        sa.Column("table_name", sa.String(64), nullable=False, comment=_TABLE),
        sa.Column("entity_id", sa.String(512), nullable=False, comment=_ENTITY),
        sa.Column("upserted_lamport", sa.BigInteger, nullable=True,
                  comment="Lamport timestamp of the greatest upsert seen (NULL: none yet)"),
        sa.Column("upserted_by", sa.String(128), nullable=True,
                  comment="Sender peer id of that upsert (the version's tie-break)"),
        sa.Column("deleted_lamport", sa.BigInteger, nullable=True,
                  comment="Tombstone: Lamport timestamp of the greatest delete seen (NULL: none)"),
        sa.Column("deleted_by", sa.String(128), nullable=True,
                  comment="Sender peer id of that delete"),
        sa.Column("alive", sa.Boolean, nullable=False,
                  comment="The row is visible: an upsert is newer than every delete"),
        sa.PrimaryKeyConstraint("table_name", "entity_id", name="pk_crdt_entities"),
        comment="Per-record versions of the replicated tables (upsert version and tombstone)",
    )
    op.create_table(
        "crdt_cells",
        sa.Column("table_name", sa.String(64), nullable=False, comment=_TABLE),
        sa.Column("entity_id", sa.String(512), nullable=False, comment=_ENTITY),
        sa.Column("column_name", sa.String(64), nullable=False,
                  comment="Replicated column name"),
        sa.Column("lamport", sa.BigInteger, nullable=False,
                  comment="Lamport timestamp of the winning write (newer than the tombstone)"),
        sa.Column("sender", sa.String(128), nullable=False,
                  comment="Peer id that made the winning write"),
        sa.Column("value", sa.Text, nullable=False,
                  comment="The winning value as canonical JSON text (null for SQL NULL)"),
        sa.PrimaryKeyConstraint("table_name", "entity_id", "column_name", name="pk_crdt_cells"),
        comment="LWW register of every written column: the cells of the replicated tables",
    )
    op.create_table(
        "crdt_mempool",
        sa.Column("table_name", sa.String(64), nullable=False, comment=_TABLE),
        sa.Column("entity_id", sa.String(512), nullable=False, comment=_ENTITY),
        sa.Column("lamport", sa.BigInteger, nullable=False,
                  comment="Lamport timestamp of the held update (its event's)"),
        sa.Column("sender", sa.String(128), nullable=False,
                  comment="Peer id that sent the update"),
        sa.Column("digest", sa.String(64), nullable=False,
                  comment="Hex sha256 of the message bytes: tells apart updates of one sender "
                          "and time"),
        sa.Column("message", sa.LargeBinary, nullable=False,
                  comment="The update's canonical message encoding (docs/crdt.md)"),
        sa.Column("held_at", sa.BigInteger, nullable=False,
                  comment="Epoch milliseconds when this node held it (for the age limit)"),
        sa.PrimaryKeyConstraint("table_name", "entity_id", "lamport", "sender", "digest",
                                name="pk_crdt_mempool"),
        comment="Updates waiting for their record's first upsert (bounded mempool)",
    )
    op.create_index("ix_crdt_mempool_held_at", "crdt_mempool", ["held_at"])


def downgrade() -> None:
    op.drop_index("ix_crdt_mempool_held_at", table_name="crdt_mempool")
    op.drop_table("crdt_mempool")
    op.drop_table("crdt_cells")
    op.drop_table("crdt_entities")
