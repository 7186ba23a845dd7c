"""Nodes say whether they take their MIG layout from their pool (`carries_pool_layout`, SPEC 6.1) and
whether their last inventory asked for a reboot (`reboot_required`, SPEC 7).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("carries_pool_layout", sa.Boolean(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("reboot_required", sa.Boolean(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("reboot_required")
        batch.drop_column("carries_pool_layout")
