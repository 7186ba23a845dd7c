"""How long tenants' bookings have held each atom up to a time: the ledger summed in the database.

One grouped statement per read, so what comes back is one row per atom ever booked, not per booking.
Live bookings count from their start to the earlier of their end and `until` (an open-ended one up
to `until`); cancelled ones never held anything, and partition changes (no tenant) are no one's use.
The meter is the booking's pool's. Hours are floating point: they feed a gauge, not a bill.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, Connection, Float, and_, case, cast, extract, func, literal, or_, select

from better_compute.service.ports import HeldHours
from better_compute.storage.atoms import atom_of
from better_compute.storage.db import UtcDateTime
from better_compute.storage.tables import atoms, bookings, pools


def held_hours(conn: Connection, until: datetime) -> list[HeldHours]:
    now = literal(until, UtcDateTime)
    end = case((or_(bookings.c.ends_at.is_(None), bookings.c.ends_at > now), now), else_=bookings.c.ends_at)
    seconds: ColumnElement[float]
    if conn.dialect.name == "postgresql":
        seconds = cast(extract("epoch", end - bookings.c.starts_at), Float)
    else:
        seconds = (func.julianday(end) - func.julianday(bookings.c.starts_at)) * 86400.0
    held = (
        select(bookings.c.atom_id, pools.c.meter, func.sum(seconds).label("seconds"))
        .join(pools, pools.c.id == bookings.c.pool_id)
        .where(
            bookings.c.state == "live",
            bookings.c.tenant_id.is_not(None),
            bookings.c.starts_at < now,
        )
        .group_by(bookings.c.atom_id, pools.c.meter)
        .subquery()
    )
    stmt = select(atoms, held.c.meter, held.c.seconds).join(held, and_(held.c.atom_id == atoms.c.id))
    return [
        HeldHours(atom_of(r), str(r["meter"]), float(r["seconds"] or 0) / 3600)
        for r in (dict(row._mapping) for row in conn.execute(stmt))
    ]
