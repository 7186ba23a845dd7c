"""Workloads across clusters (docs/placement.md): workloads, their deployments (one per cluster), each
deployment's replicas (one ledger allocation each), and operations (`workload.drain`).

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from better_compute.storage.kernel.db import UtcDateTime

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workloads",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("unplaced", sa.Integer(), server_default="0", nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=True),
        sa.Column("policy_id", sa.String(length=64), nullable=True),
        sa.Column("generation", sa.Integer(), server_default="1", nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name=op.f("fk_workloads_tenant_id_tenants")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workloads")),
        sa.UniqueConstraint("tenant_id", "name", name=op.f("uq_workloads_tenant_id_name")),
    )
    op.create_index(op.f("ix_workloads_unplaced"), "workloads", ["unplaced"])
    op.create_table(
        "deployments",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("workload_id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("cluster_id", sa.String(length=64), nullable=False),
        sa.Column("desired_replicas", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=True),
        sa.Column("message", sa.Text(), server_default="", nullable=False),
        sa.Column("shortfall", sa.Integer(), server_default="0", nullable=False),
        sa.Column("generation", sa.Integer(), server_default="1", nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["workloads.id"], name=op.f("fk_deployments_workload_id_workloads")
        ),
        sa.ForeignKeyConstraint(
            ["cluster_id"], ["clusters.id"], name=op.f("fk_deployments_cluster_id_clusters")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployments")),
        sa.UniqueConstraint("workload_id", "cluster_id", name=op.f("uq_deployments_workload_id_cluster_id")),
    )
    op.create_index(op.f("ix_deployments_phase"), "deployments", ["phase"])
    op.create_table(
        "replicas",
        sa.Column("deployment_id", sa.String(length=64), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("allocation_id", sa.String(length=160), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["deployment_id"], ["deployments.id"], name=op.f("fk_replicas_deployment_id_deployments")
        ),
        sa.PrimaryKeyConstraint("deployment_id", "idx", name=op.f("pk_replicas")),
    )
    op.create_table(
        "operations",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=True),
        sa.Column("workload_id", sa.String(length=64), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("finished_at", UtcDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operations")),
    )


def downgrade() -> None:
    op.drop_table("operations")
    op.drop_table("replicas")
    op.drop_index(op.f("ix_deployments_phase"), table_name="deployments")
    op.drop_table("deployments")
    op.drop_index(op.f("ix_workloads_unplaced"), table_name="workloads")
    op.drop_table("workloads")
