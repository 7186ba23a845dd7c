"""Preemption (docs/scheduling.md#preemption-by-priority): a deployment whose replicas another workload's
placement evicted names that workload (`preempted_by`) beside its reason `preempted`, and so does each evicted
replica that terminates on its node, so that the workload waiting for its devices evicts no more meanwhile.

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
    op.add_column("terminating_replicas", sa.Column("preempted_by", sa.String(length=64), nullable=True))
    op.create_index(op.f("ix_terminating_replicas_preempted_by"), "terminating_replicas", ["preempted_by"])


def downgrade() -> None:
    op.drop_index(op.f("ix_terminating_replicas_preempted_by"), table_name="terminating_replicas")
    op.drop_column("terminating_replicas", "preempted_by")
    op.drop_column("deployments", "preempted_by")
