"""Device classes and priority classes (docs/concepts.md#device-classes, #priority-classes): named kinds of
atoms (an atom class and a selector) and named priorities for workloads, with the `standard` priority class
every store holds.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from better_compute.storage.kernel.db import UtcDateTime
from better_compute.storage.placement.priority_classes import add_standard

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "device_classes",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("class", sa.String(length=16), nullable=False),
        sa.Column("selector", sa.JSON(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_device_classes")),
    )
    op.create_table(
        "priority_classes",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("preemptible", sa.Boolean(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_priority_classes")),
    )
    # The class a workload that names none gets: there from the start, never created by a caller.
    add_standard(op.get_bind(), datetime.now(UTC))


def downgrade() -> None:
    op.drop_table("priority_classes")
    op.drop_table("device_classes")
