"""Metering: prices per meter, and each atom's share of a GPU kept on the atom and on its bookings.

`atoms.gpu_share` is `domain.fleet.shares.share` of the atom, written with it; the booking statements
copy it onto each booking (`bookings.gpu_share`) as they book, so a booking bills the share its atom
had when it was booked. Rows already there get the share their atom has now: the best record of
the past there is.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.shares import share
from better_compute.storage.kernel.db import UtcDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "prices",
        sa.Column("meter", sa.String(length=64), nullable=False),
        sa.Column("per_hour", sa.String(length=32), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("meter", name=op.f("pk_prices")),
    )
    # Plain ADD COLUMN, not a batch: SQLite's batch mode copies the table, which the bookings
    # trigger (it writes each booking's event) would not survive.
    op.add_column("atoms", sa.Column("gpu_share", sa.String(length=32), nullable=True))
    op.add_column("bookings", sa.Column("gpu_share", sa.String(length=32), nullable=True))
    _fill_shares()


def _fill_shares() -> None:
    conn = op.get_bind()
    found = conn.execute(
        sa.text('SELECT id, gpu_id, node_id, pool_id, "class", "key", attributes FROM atoms')
    )
    shares = [{"id": r[0], "share": str(share(_atom(r)))} for r in found]
    if not shares:
        return
    conn.execute(sa.text("UPDATE atoms SET gpu_share = :share WHERE id = :id"), shares)
    conn.execute(
        sa.text(
            "UPDATE bookings SET gpu_share = (SELECT a.gpu_share FROM atoms a WHERE a.id = bookings.atom_id)"
            " WHERE gpu_share IS NULL"
        )
    )


def _atom(row: Any) -> Atom:
    attributes = row[6]
    if isinstance(attributes, str):
        attributes = json.loads(attributes)
    return Atom(
        id=row[0],
        gpu_id=row[1],
        node=row[2],
        cls=row[4],
        key=row[5],
        bookable=False,
        partition_pending=False,
        pool_id=row[3],
        numa_node=None,
        nvlink_domain=None,
        attributes=attributes or {},
    )


def downgrade() -> None:
    op.execute("ALTER TABLE bookings DROP COLUMN gpu_share")
    op.execute("ALTER TABLE atoms DROP COLUMN gpu_share")
    op.drop_table("prices")
