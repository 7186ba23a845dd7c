"""Slurm clusters: a cluster's `kind` (`local` or `slurm`) and a slurm cluster's settings (`slurm`, JSON:
controller, partitions, account, access, accounts); `slurm_jobs` keeps what the Slurm follower last
read of each job it mirrors in the ledger, ours (a holding job, by allocation) or submitted directly
(an external hold), so a reservation can say why its job waits (domain.fleet.slurm_holds).

Revision ID: 0031
Revises: 0030
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from better_compute.storage.kernel.db import UtcDateTime

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("clusters", sa.Column("kind", sa.String(16), nullable=False, server_default="local"))
    op.add_column("clusters", sa.Column("slurm", sa.JSON(), nullable=True))
    op.create_table(
        "slurm_jobs",
        sa.Column("allocation_id", sa.String(160), primary_key=True),
        sa.Column("cluster_id", sa.String(64), sa.ForeignKey("clusters.id"), nullable=False, index=True),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("node_id", sa.String(128), primary_key=True),
        sa.Column("state", sa.String(24), nullable=False),
        sa.Column("reason", sa.String(200), nullable=False, server_default=""),
        sa.Column("external", sa.Boolean(), nullable=False, server_default="0"),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("slurm_jobs")
    op.drop_column("clusters", "slurm")
    op.drop_column("clusters", "kind")
