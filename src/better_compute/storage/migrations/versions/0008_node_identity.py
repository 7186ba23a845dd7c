"""Node identities: join tokens, each node's last accepted report sequence and the digest of the spec
its generation was given for, and per-node binding states of allocations
(docs/adr/0010-node-spec-and-signed-reports.md).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


# Plain ADD and DROP COLUMN, not a batch copy of `nodes`: other tables' rows refer to it (0005).


def upgrade() -> None:
    op.add_column("nodes", sa.Column("report_sequence", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("nodes", sa.Column("spec_digest", sa.String(length=64), nullable=True))
    op.add_column("nodes", sa.Column("joined_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "join_tokens",
        sa.Column("token_hash", sa.String(length=128), nullable=False),
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name="fk_join_tokens_node_id_nodes"),
        sa.PrimaryKeyConstraint("token_hash", name="pk_join_tokens"),
    )
    op.create_index("ix_join_tokens_node_id", "join_tokens", ["node_id"])
    op.create_table(
        "bindings",
        sa.Column("allocation_id", sa.String(length=160), nullable=False),
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name="fk_bindings_node_id_nodes"),
        sa.PrimaryKeyConstraint("allocation_id", "node_id", name="pk_bindings"),
    )


def downgrade() -> None:
    op.drop_table("bindings")
    op.drop_index("ix_join_tokens_node_id", table_name="join_tokens")
    op.drop_table("join_tokens")
    op.drop_column("nodes", "joined_at")
    op.drop_column("nodes", "spec_digest")
    op.drop_column("nodes", "report_sequence")
