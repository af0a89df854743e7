"""The Recon key store's summary, saved at a watermark so a restart need not rescan every key.

A trigger empties ``recon_summary`` whenever events are deleted or their key or seq changes:
the saved summary describes the log up to its watermark, and a log changed below it (by hand,
by a tool) must send the next start-up back to the full scan rather than to a wrong summary.
Appends need no trigger: their seq is above every watermark (docs/architecture.md).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_TRIGGER = "tr_events_recon_summary_stale"
_SQLITE_TRIGGERS = (
    f"CREATE TRIGGER {_TRIGGER}_delete AFTER DELETE ON events "
    "BEGIN DELETE FROM recon_summary; END",
    f"CREATE TRIGGER {_TRIGGER}_update AFTER UPDATE OF recon_key, seq ON events "
    "BEGIN DELETE FROM recon_summary; END",
)
_PG_FUNCTION = (
    "CREATE OR REPLACE FUNCTION recon_summary_stale() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN DELETE FROM recon_summary; RETURN NULL; END $$"
)
_PG_TRIGGER = (
    f"CREATE TRIGGER {_TRIGGER} AFTER DELETE OR UPDATE OF recon_key, seq OR TRUNCATE ON events "
    "FOR EACH STATEMENT EXECUTE FUNCTION recon_summary_stale()"
)


def upgrade() -> None:
    op.create_table(
        "recon_summary",
        sa.Column("id", sa.Integer, autoincrement=False, nullable=False,
                  comment="Always 1: one row"),
        sa.Column("watermark", sa.BigInteger, nullable=False,
                  comment="Highest events.seq whose key the summary holds (it holds exactly "
                          "those)"),
        sa.Column("watermark_key", sa.LargeBinary(256), nullable=True,
                  comment="recon_key of the event at the watermark (None for an empty log): a "
                          "log replaced since the save no longer has it there"),
        sa.Column("total", sa.BigInteger, nullable=False, comment="Keys the summary holds"),
        sa.Column("summary", sa.LargeBinary, nullable=False,
                  comment="Bucket boundaries, counts and hash sums (sync.recon.summary_codec)"),
        sa.Column("saved_at", sa.BigInteger, nullable=False,
                  comment="Epoch milliseconds of the save"),
        sa.PrimaryKeyConstraint("id", name="pk_recon_summary"),
        comment="The Recon key store's bucket summary at a watermark (docs/architecture.md)",
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute(_PG_TRIGGER)
    else:
        for sql in _SQLITE_TRIGGERS:
            op.execute(sql)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP TRIGGER {_TRIGGER} ON events")
        op.execute("DROP FUNCTION recon_summary_stale()")
    else:
        for suffix in ("delete", "update"):
            op.execute(f"DROP TRIGGER {_TRIGGER}_{suffix}")
    op.drop_table("recon_summary")
