"""SQL for reservations: idempotency look-ups, quota windows, the event tail and live bookings."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, or_, select, text

from better_compute.storage.inventory import rows
from better_compute.storage.tables import atoms, bookings, events, reservations

Row = dict[str, Any]


def lock(conn: Connection, key: str) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": zlib.crc32(key.encode()) - 2**31})


def by_idempotency_key(conn: Connection, tenant_id: str, key: str) -> Row | None:
    found = rows(
        conn,
        select(reservations).where(
            reservations.c.tenant_id == tenant_id, reservations.c.idempotency_key == key
        ),
    )
    return found[0] if found else None


def overlapping(
    conn: Connection, tenant_id: str, pool_id: str, start: datetime, end: datetime | None
) -> list[Row]:
    stmt = select(reservations).where(
        reservations.c.tenant_id == tenant_id,
        reservations.c.pool_id == pool_id,
        reservations.c.status != "cancelled",
        or_(reservations.c.ends_at.is_(None), reservations.c.ends_at > start),
    )
    if end is not None:
        stmt = stmt.where(reservations.c.starts_at < end)
    return rows(conn, stmt)


def held_atoms(conn: Connection, allocation_ids: Sequence[str]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {a: [] for a in allocation_ids}
    if not allocation_ids:
        return out
    stmt = (
        select(bookings.c.allocation_id, atoms)
        .join(atoms, atoms.c.id == bookings.c.atom_id)
        .where(bookings.c.allocation_id.in_(list(allocation_ids)), bookings.c.state == "live")
        .order_by(bookings.c.id)
    )
    for row in rows(conn, stmt):
        out[row.pop("allocation_id")].append(row)
    return out


def last_event_id(conn: Connection) -> int:
    return int(conn.execute(select(func.coalesce(func.max(events.c.id), 0))).scalar_one())


def events_after(conn: Connection, event_id: int, limit: int) -> list[Row]:
    return rows(conn, select(events).where(events.c.id > event_id).order_by(events.c.id).limit(limit))


def live_bookings(conn: Connection, since: datetime) -> list[Row]:
    stmt = select(
        bookings.c.allocation_id, bookings.c.atom_id, bookings.c.starts_at, bookings.c.ends_at
    ).where(bookings.c.state == "live", or_(bookings.c.ends_at.is_(None), bookings.c.ends_at > since))
    return rows(conn, stmt)
