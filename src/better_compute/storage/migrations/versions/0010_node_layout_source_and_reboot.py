"""Nodes say whether they take their MIG layout from their pool (`carries_pool_layout`,
docs/concepts.md#changing-a-pools-layout-the-gate) and whether their last inventory asked for a reboot
(`reboot_required`, docs/bcd.md#running-the-daemon-bcd-run).

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


# Plain ADD and DROP COLUMN, not a batch copy of the table: SQLite (3.35 and later) alters it in
# place, where copying `nodes` would drop a table other tables' rows refer to.
def upgrade() -> None:
    op.add_column("nodes", sa.Column("carries_pool_layout", sa.Boolean(), nullable=False, server_default="1"))
    op.add_column("nodes", sa.Column("reboot_required", sa.Boolean(), nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("nodes", "reboot_required")
    op.drop_column("nodes", "carries_pool_layout")
