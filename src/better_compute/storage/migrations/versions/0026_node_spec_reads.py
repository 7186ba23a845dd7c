"""When each node last read its spec, signed: an idle `bcd` sends no report but long-polls its spec,
and that read is what shows it alive (`doctor`'s `node.silent`). Spec reads now also take the node's
sequence number (`report_sequence`), so that a captured one cannot be sent again.

Revision ID: 0026
Revises: 0025
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("last_spec_read_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("nodes", "last_spec_read_at")
