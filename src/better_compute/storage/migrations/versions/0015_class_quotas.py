"""Device-class quota rows (docs/placement.md#quotas): how many devices of a device class a tenant may hold in
one cluster or across the fleet, beside the pool rows of `quotas`.

A fleet row stores cluster_id '' (not NULL) so that the primary key makes (tenant, device class,
scope, cluster) unique on PostgreSQL too, where NULLs in a unique key never collide.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from better_compute.storage.kernel.db import UtcDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "class_quotas",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("device_class", sa.String(length=63), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("cluster_id", sa.String(length=64), nullable=False),
        sa.Column("guaranteed_devices", sa.Integer(), nullable=False),
        sa.Column("floor_devices", sa.Integer(), nullable=False),
        sa.Column("over_quota_weight", sa.Float(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["device_class"],
            ["device_classes.name"],
            name=op.f("fk_class_quotas_device_class_device_classes"),
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "device_class", "scope", "cluster_id", name=op.f("pk_class_quotas")
        ),
    )


def downgrade() -> None:
    op.drop_table("class_quotas")
