"""The ids of reports each node had accepted, so a queued report resent after a restart takes effect
once (docs/node-auth.md, "Exactly once").

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_report_ids",
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("report_id", sa.String(length=64), nullable=False),
        sa.Column("accepted_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name="fk_node_report_ids_node_id_nodes"),
        sa.PrimaryKeyConstraint("node_id", "report_id", name="pk_node_report_ids"),
    )


def downgrade() -> None:
    op.drop_table("node_report_ids")
