"""Showback for inference components: each span of time a component's copy held a partition, with
the partition's share of its GPU and the endpoint's price per GPU-hour when it was placed. A copy
has at most one open span (the partial unique index), closed when it moves, waits or is removed.

A copy already placed when the database is upgraded gets an open span from the upgrade on, with no
price (its endpoint's price was not recorded with it): its showback counts from then, unpriced,
until the copy next moves.

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from better_compute.storage.kernel.db import UtcDateTime

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "copy_spans",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("endpoint", sa.String(length=63), nullable=False),
        sa.Column("component", sa.String(length=63), nullable=False),
        sa.Column("copy", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("atom_id", sa.String(length=32), nullable=False),
        sa.Column("gpu_share", sa.String(length=32), nullable=False),
        sa.Column("gpu_hour_price", sa.String(length=40), nullable=True),
        sa.Column("started_at", UtcDateTime(), nullable=False),
        sa.Column("ended_at", UtcDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_copy_spans")),
    )
    op.create_index("ix_copy_spans_tenant_started", "copy_spans", ["tenant_id", "started_at"])
    op.create_index(
        "ux_copy_spans_open",
        "copy_spans",
        ["component", "copy"],
        unique=True,
        sqlite_where=sa.text("ended_at IS NULL"),
        postgresql_where=sa.text("ended_at IS NULL"),
    )
    placed = sa.text(
        "INSERT INTO copy_spans (tenant_id, endpoint, component, copy, node_id, atom_id, gpu_share,"
        " gpu_hour_price, started_at)"
        " SELECT e.tenant_id, e.name, cc.component, cc.copy, cc.node_id, cc.atom_id, a.gpu_share, NULL, :now"
        " FROM component_copies cc JOIN components c ON c.name = cc.component"
        " JOIN endpoints e ON e.name = c.endpoint JOIN atoms a ON a.id = cc.atom_id"
        " WHERE cc.node_id IS NOT NULL AND a.gpu_share IS NOT NULL"
    ).bindparams(sa.bindparam("now", type_=UtcDateTime()))
    op.get_bind().execute(placed, {"now": datetime.now(UTC)})


def downgrade() -> None:
    op.drop_index("ux_copy_spans_open", table_name="copy_spans")
    op.drop_index("ix_copy_spans_tenant_started", table_name="copy_spans")
    op.drop_table("copy_spans")
