"""Events record the transaction that wrote them, so that a reader of the log can tell an event it
has not seen yet from one that will never come (see storage.ledger.reservations, the event tail).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tx", sa.BigInteger(), nullable=True))
        batch_op.create_index(batch_op.f("ix_events_tx"), ["tx"], unique=False)
    if op.get_bind().dialect.name == "postgresql":
        # Rows written before this revision keep NULL: their transactions ended long ago.
        op.execute("ALTER TABLE events ALTER COLUMN tx SET DEFAULT (pg_current_xact_id()::text::bigint)")


def downgrade() -> None:
    # Plain statements, not a batch: SQLite's batch mode copies the table, which its bookings trigger
    # (it inserts events) does not survive.
    op.drop_index("ix_events_tx", table_name="events")
    op.execute("ALTER TABLE events DROP COLUMN tx")
