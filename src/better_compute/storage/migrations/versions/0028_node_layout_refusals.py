"""What a node could not change: `nodes.layout_refused` keeps, per GPU, the layout change the node's last
inventory said the hardware (or a GPU client that would not stop) refused, and why, for `nodes.list` and
`doctor` (docs/bcd.md#layout-changes). NULL: nothing refused, which every node starts as.

Revision ID: 0028
Revises: 0027
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("layout_refused", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("nodes", "layout_refused")
