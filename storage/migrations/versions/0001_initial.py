"""Initial schema: the event log and the node state table.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_SEQ = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    lane_comment = "Sha256a lane {i}: little-endian u32 {i} of sha256(recon_key)"
    op.create_table(
        "events",
        sa.Column(
            "seq", _SEQ, primary_key=True, autoincrement=True,
            comment="Local insertion order; cursor for readers and partition column for Spark",
        ),
        sa.Column("recon_key", sa.LargeBinary(256), nullable=False,
                  comment="CIP-124 eventId of the event: the Recon sort key"),
        sa.Column("message_id", sa.String(64), nullable=False,
                  comment="SDS message id: hex sha256 of the event's stable fields"),
        sa.Column("channel", sa.String(128), nullable=False, comment="SDS channel id"),
        sa.Column("sender", sa.String(128), nullable=False, comment="Sender's libp2p peer id"),
        sa.Column(
            "lamport", sa.BigInteger, nullable=False,
            comment="Sender's Lamport timestamp (uint64, < 2^63 in practice: epoch ms based)",
        ),
        sa.Column("wire", sa.LargeBinary, nullable=False,
                  comment="Signed canonical SDS message bytes, exactly as validated"),
        *(
            sa.Column(f"lane{i}", sa.BigInteger, nullable=False, comment=lane_comment.format(i=i))
            for i in range(8)
        ),
        sa.Column("received_at", sa.BigInteger, nullable=False,
                  comment="Epoch milliseconds when this node stored the event"),
        sa.PrimaryKeyConstraint("seq", name="pk_events"),
        sa.UniqueConstraint("recon_key", name="uq_events_recon_key"),
        sa.UniqueConstraint("message_id", name="uq_events_message_id"),
        comment="The replicated append-only event log",
    )
    op.create_index("ix_events_channel_seq", "events", ["channel", "seq"])
    op.create_index("ix_events_channel_lamport", "events", ["channel", "lamport", "message_id"])
    op.create_table(
        "node_state",
        sa.Column("key", sa.String(200), nullable=False,
                  comment="State entry name, e.g. sds/<channel>"),
        sa.Column("value", sa.LargeBinary, nullable=False, comment="Opaque serialized state"),
        sa.Column("updated_at", sa.BigInteger, nullable=False,
                  comment="Epoch milliseconds of last write"),
        sa.PrimaryKeyConstraint("key", name="pk_node_state"),
        comment="Small key/value store for node state (clocks, buffers, known peers)",
    )


def downgrade() -> None:
    op.drop_table("node_state")
    op.drop_index("ix_events_channel_lamport", table_name="events")
    op.drop_index("ix_events_channel_seq", table_name="events")
    op.drop_table("events")
