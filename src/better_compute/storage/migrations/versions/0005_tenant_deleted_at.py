"""Tenants can be deleted: `deleted_at` marks one, whose row stays so that its reservations, bills and
events keep naming it, and its id is never given to another tenant.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


# Plain ADD and DROP COLUMN, not a batch copy of the table: SQLite (3.35 and later) alters it in
# place, where copying `tenants` would drop a table other tables' rows refer to.


def upgrade() -> None:
    op.add_column("tenants", sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("tenants", "deleted_at")
