"""Block streams: completed Cardinal blocks, the chain head and the applied / reverted log.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_SEQ = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_STREAM = "Block stream: the blocks application's default channel"


def upgrade() -> None:
    op.create_table(
        "blocks",
        sa.Column("stream", sa.String(128), nullable=False, comment=_STREAM),
        sa.Column("hash", sa.LargeBinary(32), nullable=False, comment="32-byte block hash"),
        sa.Column("number", sa.BigInteger, nullable=False, comment="Block number"),
        sa.Column("parent", sa.LargeBinary(32), nullable=False,
                  comment="Parent block hash (all zeros for a first block)"),
        sa.Column("weight", sa.String(80), nullable=False,
                  comment="Chain weight as a decimal string (up to 2^256-1)"),
        sa.Column("canonical", sa.Boolean, nullable=False,
                  comment="True while the block is on this node's canonical chain"),
        sa.Column("payload", sa.Text, nullable=False,
                  comment="Block payload in the JSONL format of docs/cardinal.md (tracked parts)"),
        sa.Column("applied_at", sa.BigInteger, nullable=False,
                  comment="Epoch milliseconds when the block was last applied or reverted"),
        sa.PrimaryKeyConstraint("stream", "hash", name="pk_blocks"),
        comment="Completed Cardinal Streams blocks this node applied (reverted ones kept)",
    )
    op.create_index("ix_blocks_stream_number", "blocks", ["stream", "number"])
    op.create_table(
        "block_head",
        sa.Column("stream", sa.String(128), nullable=False, comment=_STREAM),
        sa.Column("hash", sa.LargeBinary(32), nullable=False, comment="Head block hash"),
        sa.Column("number", sa.BigInteger, nullable=False, comment="Head block number"),
        sa.Column("weight", sa.String(80), nullable=False,
                  comment="Head weight as a decimal string"),
        sa.Column("updated_at", sa.BigInteger, nullable=False,
                  comment="Epoch milliseconds of the last head change"),
        sa.PrimaryKeyConstraint("stream", name="pk_block_head"),
        comment="Current canonical head of each block stream",
    )
    op.create_table(
        "block_log",
        sa.Column("seq", _SEQ, primary_key=True, autoincrement=True,
                  comment="Order of head changes; cursor for `syncnode blocks follow`"),
        sa.Column("stream", sa.String(128), nullable=False, comment=_STREAM),
        sa.Column("kind", sa.String(16), nullable=False, comment="applied or reverted"),
        sa.Column("hash", sa.LargeBinary(32), nullable=False, comment="Block hash"),
        sa.Column("number", sa.BigInteger, nullable=False, comment="Block number"),
        sa.Column("at", sa.BigInteger, nullable=False, comment="Epoch milliseconds of the change"),
        sa.PrimaryKeyConstraint("seq", name="pk_block_log"),
        comment="Applied and reverted blocks in the order this node saw them",
    )
    op.create_index("ix_block_log_stream_seq", "block_log", ["stream", "seq"])


def downgrade() -> None:
    op.drop_index("ix_block_log_stream_seq", table_name="block_log")
    op.drop_table("block_log")
    op.drop_table("block_head")
    op.drop_index("ix_blocks_stream_number", table_name="blocks")
    op.drop_table("blocks")
