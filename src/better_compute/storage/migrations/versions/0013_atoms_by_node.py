"""An index of atoms by node: ingestion, the node spec and the MIG layout gate read a node's atoms, which
scanned the whole table.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_atoms_node_id", "atoms", ["node_id"])


def downgrade() -> None:
    op.drop_index("ix_atoms_node_id", table_name="atoms")
