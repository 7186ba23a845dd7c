"""Logs through the node: `node_agents` keeps where each node's agent listens (`bcd run --listen`) and
the bearer token it answers to, as the node last reported them in a signed `Agent` report
(domain.fleet.node_agents). The token is never shown by any answer.

Revision ID: 0030
Revises: 0029
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from better_compute.storage.kernel.db import UtcDateTime

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_agents",
        sa.Column("node_id", sa.String(128), sa.ForeignKey("nodes.id"), primary_key=True),
        sa.Column("url", sa.String(300), nullable=False),
        sa.Column("token", sa.String(128), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("node_agents")
