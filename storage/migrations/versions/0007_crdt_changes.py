"""Replicated database: the change feed (``crdt_changes``) subscribers follow and resume.

The database application writes one row per visible row change in the transaction that
applies the writes, so a change id, once seen, survives a restart and ``?since=ID`` resumes
exactly after it. SQLite's AUTOINCREMENT keeps ids from being reused after old ones are
pruned (``db.changes_retain``).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_SEQ = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TABLE = "Replicated table name, as declared in db.tables"
_ENTITY = "Entity id: the row key of the replicated table"


def upgrade() -> None:
    op.create_table(
        "crdt_changes",
        sa.Column("change_id", _SEQ, autoincrement=True, nullable=False,
                  comment="Change id: increases with every change, never reused (a "
                          "subscriber's resume cursor, ?since=)"),
        sa.Column("table_name", sa.String(64), nullable=False, comment=_TABLE),
        sa.Column("entity_id", sa.String(512), nullable=True, comment=_ENTITY + " (NULL: reset)"),
        sa.Column("kind", sa.String(16), nullable=False,
                  comment="upsert (visible with these values), delete (no longer visible) or "
                          "reset (the table was re-derived: read it again)"),
        sa.Column("row_values", sa.Text, nullable=True,
                  comment="upsert: the visible row as canonical JSON (every declared column)"),
        sa.Column("lamport", sa.BigInteger, nullable=False,
                  comment="Lamport timestamp of the last write that made the change"),
        sa.Column("sender", sa.String(128), nullable=False,
                  comment="Peer id of that write's signer"),
        sa.Column("at", sa.BigInteger, nullable=False,
                  comment="Epoch milliseconds when this node applied it"),
        sa.PrimaryKeyConstraint("change_id", name="pk_crdt_changes"),
        comment="Row changes of the replicated tables, newest db.changes_retain kept",
        sqlite_autoincrement=True,
    )
    op.create_index("ix_crdt_changes_table_name_change_id", "crdt_changes",
                    ["table_name", "change_id"])


def downgrade() -> None:
    op.drop_index("ix_crdt_changes_table_name_change_id", table_name="crdt_changes")
    op.drop_table("crdt_changes")
