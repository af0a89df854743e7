"""Replicated database: schemas declared on the log, tombstone compaction, no mempool table.

Updates to records not upserted yet are now invisible registers in ``crdt_cells`` (bounded by
the columns), so ``crdt_mempool`` goes; held updates it still has are in the event log, and the
db application's tables are rebuilt from the log (its cursor is reset); the last stored seq is
kept (``app/db/legacy_seq``): writes up to it were made before schemas were on the log.
``crdt_schemas`` keeps the declarations that count, and an index finds the tombstones old
enough to compact.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_TABLE = "Replicated table name, as declared in db.tables"
# The last event stored before this migration (node.apps.db_log.LEGACY_KEY).
LEGACY_KEY = "app/db/legacy_seq"


def upgrade() -> None:
    op.drop_index("ix_crdt_mempool_held_at", table_name="crdt_mempool")
    op.drop_table("crdt_mempool")
    op.create_table(
        "crdt_schemas",
        sa.Column("table_name", sa.String(64), nullable=False, comment=_TABLE),
        sa.Column("lamport", sa.BigInteger, nullable=False,
                  comment="Lamport timestamp of the declaring event"),
        sa.Column("sender", sa.String(128), nullable=False, comment="Peer id that signed it"),
        sa.Column("digest", sa.String(64), nullable=False,
                  comment="Hex sha256 of the declaration bytes: tells apart declarations of "
                          "one time"),
        sa.Column("declaration", sa.LargeBinary, nullable=False,
                  comment="The canonical declaration (docs/crdt.md, Schemas on the log)"),
        sa.PrimaryKeyConstraint("table_name", "lamport", "sender", "digest",
                                name="pk_crdt_schemas"),
        comment="Schema declarations that count for a replicated table (its owner's versions)",
    )
    op.create_index("ix_crdt_entities_deleted", "crdt_entities",
                    ["table_name", "deleted_lamport"])
    # Schemas now come from the log: re-derive every table from it.
    op.execute("DELETE FROM crdt_cells")
    op.execute("DELETE FROM crdt_entities")
    op.execute("DELETE FROM node_state WHERE key LIKE 'app/db/%'")
    # The writes stored so far were made under config schemas: the node declares its config's
    # tables backdated so that they count again (node.apps.db_publish.SchemaSeeder).
    conn = op.get_bind()
    last = conn.execute(sa.text("SELECT COALESCE(MAX(seq), 0) FROM events")).scalar_one()
    if last:
        conn.execute(sa.text("INSERT INTO node_state (key, value, updated_at) "
                             "VALUES (:key, :value, 0)"),
                     {"key": LEGACY_KEY, "value": str(last).encode()})


def downgrade() -> None:
    op.drop_index("ix_crdt_entities_deleted", table_name="crdt_entities")
    op.drop_table("crdt_schemas")
    op.create_table(
        "crdt_mempool",
        sa.Column("table_name", sa.String(64), nullable=False),
        sa.Column("entity_id", sa.String(512), nullable=False),
        sa.Column("lamport", sa.BigInteger, nullable=False),
        sa.Column("sender", sa.String(128), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("message", sa.LargeBinary, nullable=False),
        sa.Column("held_at", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("table_name", "entity_id", "lamport", "sender", "digest",
                                name="pk_crdt_mempool"),
    )
    op.create_index("ix_crdt_mempool_held_at", "crdt_mempool", ["held_at"])
    op.execute("DELETE FROM crdt_cells")
    op.execute("DELETE FROM crdt_entities")
    op.execute("DELETE FROM node_state WHERE key LIKE 'app/db/%'")
