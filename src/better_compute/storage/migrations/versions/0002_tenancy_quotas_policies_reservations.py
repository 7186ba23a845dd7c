"""Tenancy: quota rows per class, IAM policies, and reservations.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "policies",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("pool_id", sa.String(length=64), nullable=True),
        sa.Column("limits", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["pool_id"], ["pools.id"], name=op.f("fk_policies_pool_id_pools")),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name=op.f("fk_policies_tenant_id_tenants")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_policies")),
        sa.UniqueConstraint("tenant_id", "name", name=op.f("uq_policies_tenant_id_name")),
    )
    with op.batch_alter_table("policies", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_policies_tenant_id"), ["tenant_id"], unique=False)

    op.create_table(
        "quotas",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("pool_id", sa.String(length=64), nullable=False),
        sa.Column("class", sa.String(length=16), nullable=False),
        sa.Column("limit", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["pool_id"], ["pools.id"], name=op.f("fk_quotas_pool_id_pools")),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name=op.f("fk_quotas_tenant_id_tenants")),
        sa.PrimaryKeyConstraint("tenant_id", "pool_id", "class", name=op.f("pk_quotas")),
    )
    op.create_table(
        "reservations",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("pool_id", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("devices", sa.JSON(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("gpu_slices", sa.Integer(), nullable=False),
        sa.Column("counts", sa.JSON(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("generation", sa.Integer(), server_default="1", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["pool_id"], ["pools.id"], name=op.f("fk_reservations_pool_id_pools")),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_reservations_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reservations")),
        sa.UniqueConstraint(
            "tenant_id", "idempotency_key", name=op.f("uq_reservations_tenant_id_idempotency_key")
        ),
    )


def downgrade() -> None:
    op.drop_table("reservations")
    op.drop_table("quotas")
    with op.batch_alter_table("policies", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_policies_tenant_id"))

    op.drop_table("policies")
