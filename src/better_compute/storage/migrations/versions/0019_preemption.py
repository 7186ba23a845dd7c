"""Preemption (SPEC 10): a deployment whose replicas another workload's placement evicted names that
workload (`preempted_by`) beside its reason `preempted`.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("deployments", sa.Column("preempted_by", sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column("deployments", "preempted_by")
