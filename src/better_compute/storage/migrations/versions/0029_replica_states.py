"""What runs: `replica_states` keeps each node's last word on the container it runs for an allocation
(a workload replica or an endpoint copy): created, ready, not-ready, exited or removed, why one does
not run, and where the server reaches it (domain.fleet.replica_states).

Revision ID: 0029
Revises: 0028
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from better_compute.storage.kernel.db import UtcDateTime

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "replica_states",
        sa.Column("allocation_id", sa.String(160), primary_key=True),
        sa.Column("node_id", sa.String(128), sa.ForeignKey("nodes.id"), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("problem", sa.String(32), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("restarts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("address", sa.String(300), nullable=True),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("replica_states")
