"""Terminating replicas (seed 001, "Capacity checks": a device allocated to a replica that is
terminating still counts as allocated until the allocation is removed), and each deployment's next
replica index, so that a replica's allocation id is never given to another replica.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from better_compute.storage.kernel.db import UtcDateTime

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ALTER TABLE on both databases (SQLite 3.35+ drops a column in place; a batch copy of
    # the table would trip the replicas' foreign key)
    op.add_column("deployments", sa.Column("next_replica", sa.Integer(), server_default="0", nullable=False))
    # Indexes were reused before: a replica removed earlier may have had a higher one than any
    # replica left, and its allocation id is in the ledger and the bindings. Number onward from the
    # highest index any of them shows.
    conn = op.get_bind()
    highest: dict[str, int] = {}
    for table in ("replicas", "bookings", "bindings"):
        column = "deployment_id || '.r' || idx" if table == "replicas" else "allocation_id"
        found = conn.execute(sa.text(f"SELECT DISTINCT {column} FROM {table} WHERE {column} LIKE 'dep-%.r%'"))
        for (allocation,) in found:
            head, _, tail = str(allocation).rpartition(".r")
            if head and tail.isdigit():
                highest[head] = max(highest.get(head, -1), int(tail))
    for deployment_id, index in highest.items():
        conn.execute(
            sa.text("UPDATE deployments SET next_replica = :n WHERE id = :d"),
            {"n": index + 1, "d": deployment_id},
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
    op.drop_column("deployments", "next_replica")
