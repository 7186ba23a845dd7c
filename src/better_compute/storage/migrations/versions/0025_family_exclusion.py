"""A GPU is held whole or in parts, never both at once: the ledger's fence covers a GPU's family.

Two live bookings of one GPU's atoms of different classes (its `gpu` atom and a MIG instance or a
slot of it, or a MIG instance and a slot) whose windows meet are refused, unless they are one
allocation's (a layout change's hold, an endpoint's, books the whole family at once). PostgreSQL
refuses them through a second exclusion constraint, `bookings_no_family_overlap`; SQLite's
serialised writers look for them before they insert, through an index of live bookings by GPU.
`ledger.booked` events name the booking's GPU (`gpuId`), so that the booking index knows each
booking's family: SQLite's booking trigger is installed anew with it.

A ledger written before the fence may hold such pairs in its history, which nothing can end: the
fence then covers the bookings that end after the last of them ended, and history stays as it was
written. A pair still under way or to come cannot take the constraint: the upgrade stops and names
the pairs, to be ended (a reservation cancelled, or released) before it is tried again.

Revision ID: 0025
Revises: 0024
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

_TRIGGER = (
    "CREATE TRIGGER bookings_booked_event AFTER INSERT ON bookings BEGIN"
    " INSERT INTO events (type, subject, payload, at) VALUES ('ledger.booked', NEW.allocation_id,"
    " json_object('atoms', json_array(NEW.atom_id), 'tenantId', NEW.tenant_id, 'poolId', NEW.pool_id,"
    " 'class', NEW.class,"
    " 'start', NEW.starts_at, 'end', NEW.ends_at{gpu}), NEW.created_at); END"
)

_MEETING = (
    "FROM bookings a"
    " JOIN bookings b ON b.gpu_id = a.gpu_id AND b.class > a.class AND b.allocation_id <> a.allocation_id"
    " WHERE a.state = 'live' AND b.state = 'live'"
    " AND tstzrange(a.starts_at, a.ends_at, '[)') && tstzrange(b.starts_at, b.ends_at, '[)')"
)
"""Pairs of live bookings of a GPU's whole and of a part of it that overlap (`a` the lesser class)."""

_HISTORY = (
    f"SELECT max(greatest(a.ends_at, b.ends_at)) {_MEETING} AND a.ends_at <= now() AND b.ends_at <= now()"
)
"""When the last pair already over ended (None: there is none)."""

_NOT_OVER = "({ends} IS NULL OR {ends} > '{cutoff}'::timestamptz)"
"""A booking that ends after `cutoff` (or never): one the fence covers when history holds pairs."""

_PAIRS = (
    f"SELECT a.gpu_id, a.allocation_id, a.class, b.allocation_id, b.class {_MEETING}"
    " {not_over} ORDER BY a.gpu_id, a.allocation_id, b.allocation_id LIMIT 20"
)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS bookings_booked_event")
        op.execute(_TRIGGER.format(gpu=", 'gpuId', NEW.gpu_id"))
    op.create_index(
        "ix_bookings_live_gpu_start",
        "bookings",
        ["gpu_id", "starts_at"],
        sqlite_where=sa.text("state = 'live'"),
        postgresql_where=sa.text("state = 'live'"),
    )
    if dialect == "postgresql":
        bind = op.get_bind()
        history = bind.exec_driver_sql(_HISTORY).scalar_one()
        covered, not_over = "state = 'live'", ""
        if history is not None:  # history holds pairs, which nothing can end: the fence starts after
            cutoff = history.isoformat()
            covered = f"state = 'live' AND {_NOT_OVER.format(ends='ends_at', cutoff=cutoff)}"
            not_over = (
                f"AND {_NOT_OVER.format(ends='a.ends_at', cutoff=cutoff)}"
                f" AND {_NOT_OVER.format(ends='b.ends_at', cutoff=cutoff)}"
            )
        pairs = bind.exec_driver_sql(_PAIRS.format(not_over=not_over)).all()
        if pairs:
            named = "; ".join(f"GPU {g}: {a} ({ac}) and {b} ({bc})" for g, a, ac, b, bc in pairs)
            raise RuntimeError(
                "the ledger holds live bookings of a GPU and of a part of it that overlap in time"
                f" (the first {len(pairs)}: {named}). End one allocation of each pair (reservations"
                " cancel, or release) with the version you run now, then upgrade again; pairs"
                " already over stay as history."
            )
        op.execute(
            "ALTER TABLE bookings ADD CONSTRAINT bookings_no_family_overlap EXCLUDE USING gist"
            " (gpu_id WITH =, class WITH <>, allocation_id WITH <>,"
            f" tstzrange(starts_at, ends_at, '[)') WITH &&) WHERE ({covered})"
        )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute("ALTER TABLE bookings DROP CONSTRAINT IF EXISTS bookings_no_family_overlap")
    op.drop_index("ix_bookings_live_gpu_start", table_name="bookings")
    if dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS bookings_booked_event")
        op.execute(_TRIGGER.format(gpu=""))
