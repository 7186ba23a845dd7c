"""The MIG layout gate's table: each node of a mig pool whose layout change is under way, frozen at
its layout until the change is granted (docs/concepts.md#changing-a-pools-layout-the-gate).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "capacity_mig_layouts",
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("pool_id", sa.String(length=64), nullable=False),
        sa.Column("frozen_layout", sa.String(length=512), nullable=True),
        sa.Column("pending_layout", sa.String(length=512), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("scheduled_from", sa.DateTime(timezone=True), nullable=True),
        sa.Column("granted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("granted_generation", sa.Integer(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("lease_owner", sa.String(length=64), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name="fk_capacity_mig_layouts_node_id_nodes"),
        sa.ForeignKeyConstraint(["pool_id"], ["pools.id"], name="fk_capacity_mig_layouts_pool_id_pools"),
        sa.PrimaryKeyConstraint("node_id", name="pk_capacity_mig_layouts"),
    )
    op.create_index("ix_capacity_mig_layouts_pool_id", "capacity_mig_layouts", ["pool_id"])


def downgrade() -> None:
    op.drop_index("ix_capacity_mig_layouts_pool_id", table_name="capacity_mig_layouts")
    op.drop_table("capacity_mig_layouts")
