"""`slurm_job_ids`: the Slurm job that held each allocation (a holding job of ours, a replica's job, or
a job submitted directly and booked as an external hold), written when the follower submits, adopts or
books it and never dropped with the `slurm_jobs` mirror, so a finished booking's usage row still
names its job (`usage export --slurm-job-ids`).

Revision ID: 0033
Revises: 0032
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from better_compute.storage.kernel.db import UtcDateTime

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "slurm_job_ids",
        sa.Column("allocation_id", sa.String(160), primary_key=True),
        sa.Column("cluster_id", sa.String(64), sa.ForeignKey("clusters.id"), nullable=False, index=True),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("recorded_at", UtcDateTime(), nullable=False),
    )
    # The jobs the mirror still knows are the ids there are to keep.
    op.execute(
        "INSERT INTO slurm_job_ids (allocation_id, cluster_id, job_id, recorded_at) "
        "SELECT allocation_id, MIN(cluster_id), MIN(job_id), MIN(updated_at) FROM slurm_jobs GROUP BY allocation_id"
    )


def downgrade() -> None:
    op.drop_table("slurm_job_ids")
