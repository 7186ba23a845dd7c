"""Preemptible reservations (docs/scheduling.md#who-may-be-evicted): a reservation made with
`preemptible: true` may be ended early so that a workload's replicas fit; every other reservation is
never preempted.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "reservations",
        sa.Column("preemptible", sa.Boolean(), server_default="0", nullable=False),
    )


def downgrade() -> None:
    op.drop_column("reservations", "preemptible")
