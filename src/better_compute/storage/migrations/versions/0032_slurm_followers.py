"""Slurm followers: `slurm_followers` holds the lease of the one reconciler that follows each Slurm
cluster at a time (service.ledger.slurm_holds), as the MIG gate's rows hold their nodes' leases.

Revision ID: 0032
Revises: 0031
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from better_compute.storage.kernel.db import UtcDateTime

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "slurm_followers",
        sa.Column(
            "cluster_id", sa.String(64), sa.ForeignKey("clusters.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("lease_owner", sa.String(64), nullable=False),
        sa.Column("lease_until", UtcDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("slurm_followers")
