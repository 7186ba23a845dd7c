"""Terminating replicas (seed 001, "Capacity checks": a device allocated to a replica that is
terminating still counts as allocated until the allocation is removed), and each deployment's next
replica index, so that a replica's allocation id is never given to another replica.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from better_compute.storage.db import UtcDateTime

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("deployments") as batch:
        batch.add_column(sa.Column("next_replica", sa.Integer(), server_default="0", nullable=False))
    op.execute(
        "UPDATE deployments SET next_replica = COALESCE("
        "(SELECT MAX(idx) + 1 FROM replicas WHERE replicas.deployment_id = deployments.id), 0)"
    )
    op.create_table(
        "terminating_replicas",
        sa.Column("allocation_id", sa.String(length=160), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("workload_id", sa.String(length=64), nullable=False),
        sa.Column("deployment_id", sa.String(length=64), nullable=False),
        sa.Column("cluster_id", sa.String(length=64), nullable=False),
        sa.Column("since", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("allocation_id", name=op.f("pk_terminating_replicas")),
    )
    op.create_index(op.f("ix_terminating_replicas_workload_id"), "terminating_replicas", ["workload_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_terminating_replicas_workload_id"), table_name="terminating_replicas")
    op.drop_table("terminating_replicas")
    with op.batch_alter_table("deployments") as batch:
        batch.drop_column("next_replica")
