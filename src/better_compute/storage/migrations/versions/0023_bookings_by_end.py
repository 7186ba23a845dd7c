"""Live bookings by their end: what reads "which bookings reach past now" or "which ended between
two instants" over the whole ledger (a process's warm-up on SQLite, the placement retry loop) finds
them without reading a year of history. PostgreSQL's exclusion constraint index already answers the
first by range; this one answers the second there too.

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_bookings_live_ends",
        "bookings",
        ["ends_at"],
        sqlite_where=sa.text("state = 'live'"),
        postgresql_where=sa.text("state = 'live'"),
    )


def downgrade() -> None:
    op.drop_index("ix_bookings_live_ends", table_name="bookings")
