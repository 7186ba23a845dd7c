"""Scrubbing between tenants (docs/adr/0011-scrub-between-tenants.md): each atom keeps when its node
last reported it scrubbed (`scrubbed_at`), and which tenant last released it early and when
(`released_by`, `released_at`), the row a racing admission's lock sees change.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


# Plain ADD and DROP COLUMN, not a batch copy of the table: bookings refer to atoms' rows.


def upgrade() -> None:
    op.add_column("atoms", sa.Column("scrubbed_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("atoms", sa.Column("released_by", sa.String(length=64), nullable=True))
    op.add_column("atoms", sa.Column("released_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("atoms", "released_at")
    op.drop_column("atoms", "released_by")
    op.drop_column("atoms", "scrubbed_at")
