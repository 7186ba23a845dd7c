"""Policies carry placement constraints and are attached to a subject (docs/placement.md#policies): a tenant,
an endpoint, a workload or a cluster (`subject_type`, `subject_id`), with a `generation` that every
update bumps. A cluster's policy belongs to no tenant, so `tenant_id` becomes nullable; names stay
unique per tenant, and per subject (which is what keeps a cluster's policy names apart).

Existing policies are their tenant's: subject `tenant`, subject id their tenant id, no constraints.
Going down drops the policies on anything but a tenant, which the older schema cannot hold.

`policies` is referred to by no foreign key, so SQLite may copy it (batch mode) to change it.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("policies", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("subject_type", sa.String(length=16), nullable=False, server_default="tenant")
        )
        batch_op.add_column(sa.Column("subject_id", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("constraints", sa.JSON(), nullable=False, server_default="{}"))
        batch_op.add_column(sa.Column("generation", sa.Integer(), nullable=False, server_default="1"))
    op.execute("UPDATE policies SET subject_id = tenant_id")
    with op.batch_alter_table("policies", schema=None) as batch_op:
        batch_op.alter_column("subject_id", existing_type=sa.String(length=64), nullable=False)
        batch_op.alter_column("tenant_id", existing_type=sa.String(length=64), nullable=True)
        batch_op.create_unique_constraint(
            batch_op.f("uq_policies_subject_type_subject_id_name"), ["subject_type", "subject_id", "name"]
        )


def downgrade() -> None:
    op.execute("DELETE FROM policies WHERE subject_type <> 'tenant'")
    with op.batch_alter_table("policies", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_policies_subject_type_subject_id_name"), type_="unique")
        batch_op.alter_column("tenant_id", existing_type=sa.String(length=64), nullable=False)
        batch_op.drop_column("generation")
        batch_op.drop_column("constraints")
        batch_op.drop_column("subject_id")
        batch_op.drop_column("subject_type")
