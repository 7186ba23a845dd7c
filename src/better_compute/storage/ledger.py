"""The booking ledger: the only SQL that writes bookings.

Exclusivity is the database's job: PostgreSQL refuses an overlapping live booking through the
`bookings_no_overlap` exclusion constraint; SQLite writers are serialised (`BEGIN IMMEDIATE`) and
check for overlaps on an index before they insert. Either way a refusal surfaces as `Overlap`,
never as a raw database error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import (
    ColumnElement,
    Connection,
    String,
    and_,
    cast,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from better_compute.domain.ledger import Booking, Span
from better_compute.service.ports import NotBookable, Overlap
from better_compute.storage.db import UtcDateTime
from better_compute.storage.tables import atoms, bookings, events

_PG_KEY = re.compile(r"=\((atm-[0-9a-f]+),")


def _live_overlapping(span: Span) -> list[object]:
    clauses: list[object] = [
        bookings.c.state == "live",
        or_(bookings.c.ends_at.is_(None), bookings.c.ends_at > span.start),
    ]
    if span.end is not None:
        clauses.append(bookings.c.starts_at < span.end)
    return clauses


def _fresh_booking_id(conn: Connection) -> ColumnElement[str]:
    if conn.dialect.name == "postgresql":
        return literal("bkg-") + func.replace(cast(func.gen_random_uuid(), String), "-", "")
    return literal("bkg-") + func.lower(func.hex(func.randomblob(16)))


def _row_to_booking(row: object) -> Booking:
    r = row._mapping  # type: ignore[attr-defined]
    return Booking(
        id=r["id"],
        atom_id=r["atom_id"],
        gpu_id=r["gpu_id"],
        allocation_id=r["allocation_id"],
        tenant_id=r["tenant_id"],
        span=Span(r["starts_at"], r["ends_at"]),
        state=r["state"],
    )


def book(
    conn: Connection,
    atom_ids: Sequence[str],
    span: Span,
    allocation_id: str,
    tenant_id: str | None,
    now: datetime,
    *,
    require_bookable: bool = True,
) -> int:
    """Book every atom for the window, or raise (the caller's transaction then rolls back).

    Returns the number of bookings written. Booking ids are random (`bkg-<32 hex>`), made by the database.
    """
    ids = list(dict.fromkeys(atom_ids))
    if conn.dialect.name == "sqlite":
        clash = conn.execute(
            select(bookings.c.atom_id).where(bookings.c.atom_id.in_(ids), *_live_overlapping(span)).limit(1)  # type: ignore[arg-type]
        ).first()
        if clash is not None:
            raise Overlap(clash[0])
    source = select(
        _fresh_booking_id(conn),
        atoms.c.id,
        atoms.c.gpu_id,
        atoms.c.pool_id,
        atoms.c["class"],
        literal(tenant_id),
        literal(allocation_id),
        literal(span.start, UtcDateTime),
        literal(span.end, UtcDateTime),
        literal("live"),
        literal(now, UtcDateTime),
    ).where(atoms.c.id.in_(ids))
    if require_bookable:
        source = source.where(atoms.c.bookable.is_(True))
    stmt = insert(bookings).from_select(
        [
            "id",
            "atom_id",
            "gpu_id",
            "pool_id",
            "class",
            "tenant_id",
            "allocation_id",
            "starts_at",
            "ends_at",
            "state",
            "created_at",
        ],
        source,
    )
    try:
        written = len(conn.execute(stmt.returning(bookings.c.atom_id)).all())
    except IntegrityError as exc:
        if getattr(exc.orig, "sqlstate", None) == "23P01":
            detail = getattr(getattr(exc.orig, "diag", None), "message_detail", None) or ""
            match = _PG_KEY.search(detail)
            raise Overlap(match.group(1) if match else None) from None
        raise
    if written != len(ids):
        raise NotBookable(_unbookable(conn, ids))
    conn.execute(
        insert(events).values(
            type="ledger.booked",
            subject=allocation_id,
            payload={
                "atoms": ids,
                "tenantId": tenant_id,
                "start": span.start.isoformat(),
                "end": span.end.isoformat() if span.end else None,
            },
            at=now,
        )
    )
    return written


def _unbookable(conn: Connection, ids: Sequence[str]) -> list[str]:
    ok = {
        r[0] for r in conn.execute(select(atoms.c.id).where(atoms.c.id.in_(ids), atoms.c.bookable.is_(True)))
    }
    return [i for i in ids if i not in ok]


def busy_spans(conn: Connection, atom_ids: Sequence[str], since: datetime) -> list[Span]:
    """Live bookings of these atoms that end after `since` (or never end)."""
    rows = conn.execute(
        select(bookings.c.starts_at, bookings.c.ends_at).where(
            bookings.c.atom_id.in_(list(atom_ids)),
            bookings.c.state == "live",
            or_(bookings.c.ends_at.is_(None), bookings.c.ends_at > since),
        )
    )
    return [Span(r[0], r[1]) for r in rows]


def allocation_bookings(conn: Connection, allocation_id: str) -> list[Booking]:
    rows = conn.execute(select(bookings).where(bookings.c.allocation_id == allocation_id))
    return [_row_to_booking(r) for r in rows]


def booking_allocation(conn: Connection, booking_id: str) -> str | None:
    row = conn.execute(select(bookings.c.allocation_id).where(bookings.c.id == booking_id)).first()
    return None if row is None else str(row[0])


def end_allocation(conn: Connection, allocation_id: str, now: datetime, event_type: str) -> int:
    """End every live booking of the allocation at `now`; bookings that had not started are cancelled.

    Returns how many bookings changed. Ended history stays in the ledger.
    """
    running = conn.execute(
        update(bookings)
        .where(
            bookings.c.allocation_id == allocation_id,
            bookings.c.state == "live",
            bookings.c.starts_at <= now,
            or_(bookings.c.ends_at.is_(None), bookings.c.ends_at > now),
        )
        .values(ends_at=now)
    ).rowcount
    future = conn.execute(
        update(bookings)
        .where(
            bookings.c.allocation_id == allocation_id,
            bookings.c.state == "live",
            bookings.c.starts_at > now,
        )
        .values(state="cancelled")
    ).rowcount
    changed = int(running) + int(future)
    if changed:
        conn.execute(
            insert(events).values(
                type=event_type, subject=allocation_id, payload={"at": now.isoformat()}, at=now
            )
        )
    return changed


def cancel_allocation(conn: Connection, allocation_id: str, now: datetime) -> int:
    """Cancel every live booking of the allocation (the caller checked none has started)."""
    changed = conn.execute(
        update(bookings)
        .where(bookings.c.allocation_id == allocation_id, bookings.c.state == "live")
        .values(state="cancelled")
    ).rowcount
    if changed:
        conn.execute(
            insert(events).values(
                type="ledger.cancelled", subject=allocation_id, payload={"at": now.isoformat()}, at=now
            )
        )
    return int(changed)


def family_atom_ids(conn: Connection, gpu_id: str) -> list[str]:
    """Every atom of the GPU, parent included, bookable or not."""
    return [
        r[0] for r in conn.execute(select(atoms.c.id).where(atoms.c.gpu_id == gpu_id).order_by(atoms.c.key))
    ]


def live_overlaps_on_gpu(conn: Connection, gpu_id: str, span: Span) -> bool:
    row = conn.execute(
        select(func.count())
        .select_from(bookings)
        .where(and_(bookings.c.gpu_id == gpu_id, *_live_overlapping(span)))  # type: ignore[arg-type]
    ).scalar_one()
    return bool(row)
