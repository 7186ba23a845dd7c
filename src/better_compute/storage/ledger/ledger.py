"""The booking ledger: the only SQL that writes bookings.

Exclusivity is the database's job: PostgreSQL refuses an overlapping live booking through the
`bookings_no_overlap` exclusion constraint; SQLite writers are serialised (`BEGIN IMMEDIATE`) and
check for overlaps on an index before they insert. Either way a refusal surfaces as `Overlap`,
never as a raw database error.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from sqlalchemy import (
    ColumnElement,
    Connection,
    DateTime,
    String,
    and_,
    case,
    cast,
    func,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import IntegrityError, OperationalError

from better_compute.domain.kernel.events import Event
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.events import LedgerBooked, LedgerCancelled
from better_compute.domain.ledger.ledger import PARTITION_PREFIX, Booking, is_partition_change
from better_compute.domain.ledger.records import LiveBooking
from better_compute.domain.ops.doctor import StrandedBooking
from better_compute.service.ledger.ports import NotBookable, Overlap
from better_compute.storage.fleet.atoms import atom_of, mark_released
from better_compute.storage.kernel.events import append, booked_payload_sql
from better_compute.storage.kernel.tables import atoms, bookings

_PG_KEY = re.compile(r"=\((atm-[0-9a-f]+),")


def booking_id(key: int) -> str:
    """A booking's id as users see it: `bkg-<n>`."""
    return f"bkg-{key}"


def booking_key(booking_id: str) -> int | None:
    """The database key of a `bkg-<n>` id; None for anything else."""
    digits = booking_id.removeprefix("bkg-")
    return int(digits) if booking_id.startswith("bkg-") and digits.isdigit() and len(digits) < 19 else None


def _row_to_booking(row: object) -> Booking:
    r = row._mapping  # type: ignore[attr-defined]
    return Booking(
        id=booking_id(r["id"]),
        atom_id=r["atom_id"],
        gpu_id=r["gpu_id"],
        allocation_id=r["allocation_id"],
        tenant_id=r["tenant_id"],
        span=Window(r["starts_at"], r["ends_at"]),
        state=r["state"],
    )


COLUMNS = "atom_id, gpu_id, pool_id, class, gpu_share, tenant_id, allocation_id, starts_at, ends_at, state, created_at"
"""The columns a booking is written with; its integer id comes from the database. The first five
are copied from the atom (`gpu_share`: its share of a GPU now, what the booking bills)."""


def sqlite_time(value: datetime | None) -> str | None:
    """The text SQLAlchemy's DateTime stores on SQLite, so hand-written SQL compares like mapped SQL."""
    if value is None:
        return None
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    return value.replace(tzinfo=None).isoformat(" ", "microseconds")


def _sqlite_window(alias: str, open_ended: bool) -> str:
    """Live bookings `alias` that meet the window (its start, then its end when it has one)."""
    return f" AND ({alias}.ends_at IS NULL OR {alias}.ends_at > ?)" + (
        "" if open_ended else f" AND {alias}.starts_at < ?"
    )


def _sqlite_family(atom: str, open_ended: bool) -> str:
    """Live bookings of another class of atom `atom`'s GPU, of another allocation, that meet the
    window (`domain.ledger.ledger.family_excludes`; the allocation, then the window's instants)."""
    return (
        f"SELECT 1 FROM bookings f WHERE f.gpu_id = {atom}.gpu_id AND f.state = 'live'"
        f" AND f.class <> {atom}.class AND f.allocation_id <> ?{_sqlite_window('f', open_ended)}"
    )


@functools.cache
def _sqlite_book_sql(atoms: int, open_ended: bool, require_bookable: bool) -> tuple[str, str]:
    """The booking INSERT and its clash query, for this many atoms and this kind of window."""
    marks = ",".join("?" * atoms)
    wanted = ",".join(f"(?, {n})" for n in range(atoms))
    window = _sqlite_window("b", open_ended)
    bookable = " AND bookable = 1" if require_bookable else ""
    # Bookings are written in the order the atoms were given (their keys follow it), so an
    # allocation's atoms read back in the order they were chosen. An atom is taken when a booking
    # of it, or of its GPU's family (a whole GPU and a part of it), meets the window.
    insert = (
        f"WITH want(aid, ord) AS (VALUES {wanted}),"
        " ok AS MATERIALIZED (SELECT atoms.id, gpu_id, pool_id, class, gpu_share, want.ord FROM want"
        f" JOIN atoms ON atoms.id = want.aid WHERE 1{bookable}"
        f" AND NOT EXISTS (SELECT 1 FROM bookings b WHERE b.atom_id = atoms.id AND b.state = 'live'{window})"
        f" AND NOT EXISTS ({_sqlite_family('atoms', open_ended)}))"
        f" INSERT INTO bookings ({COLUMNS}) SELECT id, gpu_id, pool_id,"
        " class, gpu_share, ?, ?, ?, ?, 'live', ? FROM ok WHERE (SELECT count(*) FROM ok) = ? ORDER BY ord"
        " RETURNING id"
    )
    clash = (
        f"SELECT atom_id FROM bookings b WHERE atom_id IN ({marks}) AND state = 'live'{window}"
        f" UNION ALL SELECT a.id FROM atoms a WHERE a.id IN ({marks})"
        f" AND EXISTS ({_sqlite_family('a', open_ended)}) LIMIT 1"
    )
    return insert, clash


def book_sqlite(
    conn: Connection,
    ids: list[str],
    span: Window,
    allocation_id: str,
    tenant_id: str | None,
    now: datetime,
    require_bookable: bool,
) -> int:
    """One INSERT that books every atom or none: its own overlap check (of each atom, and of its
    GPU's family) runs under SQLite's write lock, and the `bookings_booked_event` trigger appends
    each booking's event in the same statement, so the statement is atomic by itself and may run
    without an explicit transaction."""
    db = conn.connection.driver_connection
    assert db is not None
    insert, clash_sql = _sqlite_book_sql(len(ids), span.end is None, require_bookable)
    start, end = sqlite_time(span.start), sqlite_time(span.end)
    window_params = (start,) if end is None else (start, end)
    written = db.execute(
        insert,
        (
            *ids,
            *window_params,
            allocation_id,
            *window_params,
            tenant_id,
            allocation_id,
            start,
            end,
            sqlite_time(now),
            len(ids),
        ),
    ).fetchall()
    if len(written) != len(ids):
        clash = db.execute(clash_sql, (*ids, *window_params, *ids, allocation_id, *window_params)).fetchone()
        if clash is not None:
            raise Overlap(clash[0])
    return len(written)


BOOKED_PAYLOAD_PG = booked_payload_sql("postgresql", "b")
"""The `ledger.booked` payload of one booking row `b`: one event per booking, as SQLite's trigger writes."""

LOCKED_ATOMS_PG = (
    "SELECT id, gpu_id, pool_id, class, gpu_share FROM atoms WHERE id = ANY(%(ids)s::text[]){bookable}"
    " ORDER BY id FOR SHARE"
)
"""The atoms a booking statement books, share-locked (in id order, so lockers never deadlock).

A change that removes atoms from a pool (fewer `replicas`, a node leaving) updates their rows and
then looks for live bookings on them. The lock makes the two exclude each other: a booking that
locks first makes the change wait for its commit, and the change's look-up then sees it; a change
that updates first makes the booking wait, and PostgreSQL re-checks the row it locks, now
unbookable, so nothing is written. (The foreign key's own check takes only FOR KEY SHARE, which an
update of other columns does not conflict with.) The rows come back as locked, after any such
change, so what is written is what the atoms are now."""

_PG_BOOK = (
    "WITH l AS (" + LOCKED_ATOMS_PG + "),"
    " b AS (INSERT INTO bookings ("
    + COLUMNS
    + ") SELECT l.id, l.gpu_id, l.pool_id, l.class, l.gpu_share, %(tenant)s, %(alloc)s, %(start)s, %(end)s,"
    " 'live', %(now)s"
    " FROM l WHERE (SELECT count(*) FROM l) = %(n)s::bigint"
    " RETURNING atom_id, tenant_id, pool_id, class, starts_at, ends_at, gpu_id),"
    " e AS (INSERT INTO events (type, subject, payload, at) SELECT '"
    + LedgerBooked.TYPE
    + "', %(alloc)s, "
    + BOOKED_PAYLOAD_PG
    + ","
    " %(now)s FROM b)"
    " SELECT count(*) FROM b"
)
_PG_BOOK_BOOKABLE = _PG_BOOK.replace("{bookable}", " AND bookable")
_PG_BOOK_ANY = _PG_BOOK.replace("{bookable}", "")


def _book_postgres(
    conn: Connection,
    ids: list[str],
    span: Window,
    allocation_id: str,
    tenant_id: str | None,
    now: datetime,
    require_bookable: bool,
) -> int:
    params = {
        "tenant": tenant_id,
        "alloc": allocation_id,
        "start": span.start,
        "end": span.end,
        "now": now,
        "ids": ids,
        "n": len(ids),
    }
    db = conn.connection.driver_connection
    assert db is not None
    try:
        row = db.execute(
            _PG_BOOK_BOOKABLE if require_bookable else _PG_BOOK_ANY, params, prepare=True
        ).fetchone()
    except psycopg.errors.ExclusionViolation as exc:
        raise overlap_from(exc) from None
    except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
        raise contended() from None
    return int(row[0]) if row is not None else 0


_PG_HOLD = (
    "WITH w AS (SELECT * FROM unnest(%(ids)s::text[], %(allocs)s::text[]) AS w(id, alloc)),"
    " l AS (SELECT atoms.id, gpu_id, pool_id, class, gpu_share, w.alloc FROM atoms JOIN w ON atoms.id = w.id"
    " ORDER BY atoms.id FOR SHARE OF atoms),"
    " b AS (INSERT INTO bookings ("
    + COLUMNS
    + ") SELECT l.id, l.gpu_id, l.pool_id, l.class, l.gpu_share, NULL, l.alloc, %(start)s, %(end)s,"
    " 'live', %(now)s"
    " FROM l WHERE (SELECT count(*) FROM l) = %(n)s::bigint"
    " RETURNING atom_id, tenant_id, pool_id, class, starts_at, ends_at, gpu_id, allocation_id),"
    " e AS (INSERT INTO events (type, subject, payload, at) SELECT '"
    + LedgerBooked.TYPE
    + "', b.allocation_id, "
    + BOOKED_PAYLOAD_PG
    + ","
    " %(now)s FROM b)"
    " SELECT count(*) FROM b"
)
"""`book`'s statement for several allocations at once, no tenant, bookable or not: what a layout
change's holds write for every GPU of a node in one round trip."""


def book_holds(conn: Connection, groups: Mapping[str, Sequence[str]], span: Window, now: datetime) -> int:
    """Book each allocation's atoms for the window with no tenant, bookable or not (a layout
    change's holds), all or nothing; raises as `book` does. One statement on PostgreSQL."""
    if conn.dialect.name != "postgresql":
        return sum(
            book(conn, ids, span, allocation, None, now, require_bookable=False)
            for allocation, ids in sorted(groups.items())
        )
    pairs = [(atom, allocation) for allocation, ids in sorted(groups.items()) for atom in dict.fromkeys(ids)]
    params = {
        "ids": [a for a, _ in pairs],
        "allocs": [g for _, g in pairs],
        "start": span.start,
        "end": span.end,
        "now": now,
        "n": len(pairs),
    }
    db = conn.connection.driver_connection
    assert db is not None
    try:
        row = db.execute(_PG_HOLD, params, prepare=True).fetchone()
    except psycopg.errors.ExclusionViolation as exc:
        raise overlap_from(exc) from None
    except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
        raise contended() from None
    written = int(row[0]) if row is not None else 0
    if written != len(pairs):
        raise NotBookable(unbookable(conn, [a for a, _ in pairs]))
    return written


def overlap_from(exc: psycopg.errors.ExclusionViolation) -> Overlap:
    """The atom PostgreSQL names in an exclusion violation, as an Overlap."""
    match = _PG_KEY.search(exc.diag.message_detail or "")
    return Overlap(match.group(1) if match else None)


def contended() -> Overlap:
    """Two bookings of one atom that both waited on a third transaction's booking of it (say one
    that then rolled back) re-check each other when it ends, and PostgreSQL breaks the deadlock by
    refusing one. Nothing was written: to the caller it is a lost race for the atom, decided again."""
    return Overlap(None)


def book(
    conn: Connection,
    atom_ids: Sequence[str],
    span: Window,
    allocation_id: str,
    tenant_id: str | None,
    now: datetime,
    *,
    require_bookable: bool = True,
) -> int:
    """Book every atom for the window, or raise; nothing is written unless everything is.

    This is the hot path, so it is one hand-written statement per dialect, atomic by itself: the
    bookings and one `ledger.booked` event per booking (a CTE on PostgreSQL, a trigger on SQLite).
    Returns the number of bookings written. Booking ids are `bkg-<n>`.
    """
    ids = list(dict.fromkeys(atom_ids))
    writer = _book_postgres if conn.dialect.name == "postgresql" else book_sqlite
    written = writer(conn, ids, span, allocation_id, tenant_id, now, require_bookable)
    if written != len(ids):
        raise NotBookable(unbookable(conn, ids))
    return written


def try_book(
    conn: Connection,
    atom_ids: Sequence[str],
    span: Window,
    allocation_id: str,
    tenant_id: str | None,
    now: datetime,
) -> bool:
    """Book as `book` does, or write nothing and answer False when an atom is taken or no longer
    bookable, leaving the transaction usable. On PostgreSQL a refused statement aborts its
    transaction, so the booking runs inside a savepoint (two more round trips: callers use this
    only once plain `book` has lost its races); SQLite's statement writes all or nothing by itself."""
    postgres = conn.dialect.name == "postgresql"
    db = conn.connection.driver_connection
    assert db is not None
    if postgres:
        db.execute("SAVEPOINT bc_try_book")
    try:
        book(conn, atom_ids, span, allocation_id, tenant_id, now)
    except (Overlap, NotBookable):
        if postgres:
            db.execute("ROLLBACK TO SAVEPOINT bc_try_book")
        return False
    if postgres:
        db.execute("RELEASE SAVEPOINT bc_try_book")
    return True


def unbookable(conn: Connection, ids: Sequence[str]) -> list[str]:
    ok = {
        r[0] for r in conn.execute(select(atoms.c.id).where(atoms.c.id.in_(ids), atoms.c.bookable.is_(True)))
    }
    return [i for i in ids if i not in ok]


def busy_spans(conn: Connection, atom_ids: Sequence[str], since: datetime) -> list[Window]:
    """Live bookings of these atoms that end after `since` (or never end)."""
    rows = conn.execute(
        select(bookings.c.starts_at, bookings.c.ends_at).where(
            bookings.c.atom_id.in_(list(atom_ids)), reaching_past(conn, since)
        )
    )
    return [Window(r[0], r[1]) for r in rows]


def taking_spans(conn: Connection, atom_ids: Sequence[str], since: datetime) -> list[Window]:
    """Live bookings that end after `since` (or never) of these atoms, or of another class of atom
    of their GPUs (`domain.ledger.ledger.family_excludes`): what keeps them from being booked."""
    wanted = atoms.alias("wanted")
    rows = conn.execute(
        select(bookings.c.starts_at, bookings.c.ends_at)
        .select_from(
            wanted.join(
                bookings,
                or_(
                    bookings.c.atom_id == wanted.c.id,
                    and_(bookings.c.gpu_id == wanted.c.gpu_id, bookings.c["class"] != wanted.c["class"]),
                ),
            )
        )
        .where(wanted.c.id.in_(list(atom_ids)), reaching_past(conn, since))
    )
    return [Window(r[0], r[1]) for r in rows]


def allocation_bookings(conn: Connection, allocation_id: str) -> list[Booking]:
    rows = conn.execute(select(bookings).where(bookings.c.allocation_id == allocation_id))
    return [_row_to_booking(r) for r in rows]


def booking_allocation(conn: Connection, booking_id: str) -> str | None:
    key = booking_key(booking_id)
    if key is None:
        return None
    row = conn.execute(select(bookings.c.allocation_id).where(bookings.c.id == key)).first()
    return None if row is None else str(row[0])


def end_allocation(conn: Connection, allocation_id: str, now: datetime, event: Event) -> int:
    """Release the allocation at `now` as `domain.ledger.ledger.released` says: live bookings that have
    started end at `now`, those that had not are cancelled, those already over are left alone.

    Returns how many bookings changed. Ended history stays in the ledger. A tenant's atoms whose
    bookings end here are first marked released by it (storage.fleet.atoms.mark_released), which a scrub
    between tenants needs to see (domain.ledger.scrub).
    """
    started = conn.execute(
        select(bookings.c.atom_id, bookings.c.tenant_id).where(
            bookings.c.allocation_id == allocation_id,
            bookings.c.state == "live",
            bookings.c.tenant_id.is_not(None),
            bookings.c.starts_at < now,
            or_(bookings.c.ends_at.is_(None), bookings.c.ends_at > now),
        )
    ).all()
    by_tenant: dict[str, list[str]] = {}
    for atom_id, tenant_id in started:
        by_tenant.setdefault(str(tenant_id), []).append(str(atom_id))
    for tenant_id, atom_ids in sorted(by_tenant.items()):
        mark_released(conn, atom_ids, tenant_id, now)
    running = conn.execute(
        update(bookings)
        .where(
            bookings.c.allocation_id == allocation_id,
            bookings.c.state == "live",
            bookings.c.starts_at < now,
            or_(bookings.c.ends_at.is_(None), bookings.c.ends_at > now),
        )
        .values(ends_at=now)
    ).rowcount
    future = conn.execute(
        update(bookings)
        .where(
            bookings.c.allocation_id == allocation_id,
            bookings.c.state == "live",
            bookings.c.starts_at >= now,
        )
        .values(state="cancelled")
    ).rowcount
    changed = int(running) + int(future)
    if changed:
        append(conn, event, now)
    return changed


def extend_allocation(
    conn: Connection, allocation_id: str, end: datetime, event: Event, now: datetime
) -> int:
    """Move the end of the allocation's live bookings to `end` (later than their end), or raise
    Overlap naming an atom another live booking holds in the added time; nothing is written then.

    PostgreSQL's exclusion constraint refuses the UPDATE itself. SQLite's writers are serialised, so
    the look-up for a clash before the UPDATE cannot be overtaken by another booking.
    """
    mine = bookings.alias("mine")
    if conn.dialect.name != "postgresql":
        # Another allocation's booking of the same atom, or of another class of the same GPU
        # (domain.ledger.ledger.family_excludes), in the added time.
        same_atom = mine.c.atom_id == bookings.c.atom_id
        family = and_(mine.c.gpu_id == bookings.c.gpu_id, mine.c["class"] != bookings.c["class"])
        for meets in (same_atom, family):
            clash = conn.execute(
                select(mine.c.atom_id)
                .join(bookings, meets)
                .where(
                    mine.c.allocation_id == allocation_id,
                    mine.c.state == "live",
                    bookings.c.allocation_id != allocation_id,
                    bookings.c.state == "live",
                    bookings.c.starts_at < end,
                    or_(bookings.c.ends_at.is_(None), bookings.c.ends_at > mine.c.ends_at),
                )
                .limit(1)
            ).first()
            if clash is not None:
                raise Overlap(str(clash[0]))
    try:
        changed = conn.execute(
            update(bookings)
            .where(bookings.c.allocation_id == allocation_id, bookings.c.state == "live")
            .values(ends_at=end)
        ).rowcount
    except IntegrityError as exc:
        if isinstance(exc.orig, psycopg.errors.ExclusionViolation):
            raise overlap_from(exc.orig) from None
        raise
    except OperationalError as exc:
        if isinstance(exc.orig, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure):
            raise contended() from None
        raise
    if changed:
        append(conn, event, now)
    return int(changed)


def rebind(
    conn: Connection, moves: Sequence[tuple[str, str, str]], now: datetime, events: Sequence[Event]
) -> int:
    """Move live bookings (those not over at `now`): each (allocation, source atom, target atom) of
    `moves`, windows kept; or raise Overlap naming a target another live booking holds in that
    window, and nothing is written then (the caller's transaction is rolled back).

    Every row is first set aside (state `moving`, outside both exclusion constraints), then each is
    put on its target and made live again, so two allocations swapping cards pass; PostgreSQL's
    constraints check each row as it comes back. SQLite's writers are serialised: the look-up for a
    clash before the update cannot be overtaken. Appends `events` when a booking moved; returns how
    many moved."""
    wanted = {(allocation, source): target for allocation, source, target in moves}
    if not wanted:
        return 0
    found = [
        r
        for r in conn.execute(
            select(
                bookings.c.id,
                bookings.c.allocation_id,
                bookings.c.atom_id,
                bookings.c.starts_at,
                bookings.c.ends_at,
            ).where(
                bookings.c.allocation_id.in_(sorted({a for a, _ in wanted})),
                bookings.c.state == "live",
                bookings.c.atom_id.in_(sorted({s for _, s in wanted})),
                or_(bookings.c.ends_at.is_(None), bookings.c.ends_at > now),
            )
        ).all()
        if (r[1], r[2]) in wanted
    ]
    if not found:
        return 0
    targets = sorted(set(wanted.values()))
    shape = {
        r[0]: r[1:]
        for r in conn.execute(
            select(atoms.c.id, atoms.c.gpu_id, atoms.c.pool_id, atoms.c["class"], atoms.c.gpu_share).where(
                atoms.c.id.in_(targets)
            )
        ).all()
    }
    missing = [t for t in targets if t not in shape]
    if missing:
        raise NotBookable(missing)
    keys = [r[0] for r in found]
    if conn.dialect.name != "postgresql":
        after = {(r[1], wanted[(r[1], r[2])], r[3], r[4]) for r in found}
        for allocation, target, start, end in after:
            gpu, _, cls, _ = shape[target]
            overlapping = [b for b in after if b[0] != allocation and (b[3] is None or b[3] > start)]
            if any(b[1] == target and (end is None or b[2] < end) for b in overlapping):
                raise Overlap(target)
            clash = conn.execute(
                select(bookings.c.atom_id)
                .where(
                    bookings.c.state == "live",
                    bookings.c.id.not_in(keys),
                    or_(bookings.c.ends_at.is_(None), bookings.c.ends_at > start),
                    *([] if end is None else [bookings.c.starts_at < end]),
                    or_(
                        bookings.c.atom_id == target,
                        and_(
                            bookings.c.gpu_id == gpu,
                            bookings.c["class"] != cls,
                            bookings.c.allocation_id != allocation,
                        ),
                    ),
                )
                .limit(1)
            ).first()
            if clash is not None:
                raise Overlap(target)
    conn.execute(update(bookings).where(bookings.c.id.in_(keys)).values(state="moving"))
    try:
        for key, allocation, source, _, _ in found:
            target = wanted[(allocation, source)]
            gpu, pool, cls, share = shape[target]
            conn.execute(
                update(bookings)
                .where(bookings.c.id == key)
                .values(
                    {
                        "atom_id": target,
                        "gpu_id": gpu,
                        "pool_id": pool,
                        "class": cls,
                        "gpu_share": share,
                        "state": "live",
                    }
                )
            )
    except IntegrityError as exc:
        if isinstance(exc.orig, psycopg.errors.ExclusionViolation):
            raise overlap_from(exc.orig) from None
        raise
    except OperationalError as exc:
        if isinstance(exc.orig, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure):
            raise contended() from None
        raise
    for event in events:
        append(conn, event, now)
    return len(found)


def cancel_allocation(conn: Connection, allocation_id: str, now: datetime) -> int:
    """Cancel every live booking of the allocation (the caller checked none has started)."""
    changed = conn.execute(
        update(bookings)
        .where(bookings.c.allocation_id == allocation_id, bookings.c.state == "live")
        .values(state="cancelled")
    ).rowcount
    if changed:
        append(conn, LedgerCancelled(allocation_id, now), now)
    return int(changed)


def family_atom_ids(conn: Connection, gpu_id: str) -> list[str]:
    """Every atom of the GPU, parent included, bookable or not."""
    return [
        r[0] for r in conn.execute(select(atoms.c.id).where(atoms.c.gpu_id == gpu_id).order_by(atoms.c.key))
    ]


def reaching_past(conn: Connection, since: datetime) -> ColumnElement[bool]:
    """Live bookings that end after `since` (or never). On PostgreSQL as a range overlap, which the
    exclusion constraint's GiST index (atom, range) answers by visiting only the bookings that reach
    past `since`: `ends_at > since` let it visit an atom's whole history, every booking it ever had
    (a node's spec read and a layout step grew slower with every booking made there)."""
    live = bookings.c.state == "live"
    if conn.dialect.name != "postgresql":
        return and_(live, or_(bookings.c.ends_at.is_(None), bookings.c.ends_at > since))
    stamp = DateTime(timezone=True)
    span = func.tstzrange(bookings.c.starts_at, bookings.c.ends_at, "[)")
    return and_(live, span.op("&&")(func.tstzrange(cast(since, stamp), cast(null(), stamp), "[)")))


def live_bookings(
    conn: Connection, since: datetime, atom_ids: Sequence[str] | None = None
) -> list[LiveBooking]:
    """Live bookings that end after `since` (or never); only those of `atom_ids` when given (on
    PostgreSQL joined to them, so each atom is one look-up of the exclusion constraint's index)."""
    stmt = select(
        bookings.c.allocation_id,
        bookings.c.atom_id,
        bookings.c.starts_at,
        bookings.c.ends_at,
        bookings.c.tenant_id,
        bookings.c.pool_id,
        bookings.c["class"],
        bookings.c.gpu_id,
    ).where(reaching_past(conn, since))
    if atom_ids is not None and conn.dialect.name == "postgresql":
        wanted = func.unnest(cast(list(atom_ids), ARRAY(String))).table_valued("id").render_derived("wanted")
        stmt = stmt.select_from(wanted.join(bookings, bookings.c.atom_id == wanted.c.id))
    elif atom_ids is not None:
        stmt = stmt.where(bookings.c.atom_id.in_(list(atom_ids)))
    return [LiveBooking(a, atom, s, e, t, p, c, g) for a, atom, s, e, t, p, c, g in conn.execute(stmt)]


def tenants_booked_until(conn: Connection, node_id: str, since: datetime) -> tuple[datetime | None, bool]:
    """Of tenants' live bookings on the node's atoms that end after `since` (or never): the latest
    end, and whether one never ends. One aggregate over the node's atoms (partition holds, which
    have no tenant, left out): what the layout gate plans a node's change from."""
    ends = bookings.c.ends_at
    stmt = (
        select(func.max(ends, type_=ends.type), func.sum(case((ends.is_(None), 1), else_=0)))
        .select_from(bookings.join(atoms, atoms.c.id == bookings.c.atom_id))
        .where(atoms.c.node_id == node_id, bookings.c.tenant_id.is_not(None), reaching_past(conn, since))
    )
    row = conn.execute(stmt).one()
    return row[0], bool(row[1])


def nodes_booked_by(conn: Connection, allocation_ids: Sequence[str]) -> set[str]:
    """The nodes whose atoms these allocations booked, ended bookings included: where a layout change
    may have been held back by them."""
    if not allocation_ids:
        return set()
    stmt = (
        select(atoms.c.node_id)
        .distinct()
        .select_from(bookings.join(atoms, atoms.c.id == bookings.c.atom_id))
        .where(bookings.c.allocation_id.in_(list(allocation_ids)))
    )
    return {str(r[0]) for r in conn.execute(stmt)}


def whole_gpus_held(conn: Connection, pool_ids: Sequence[str] | None, window: Window) -> list[Window]:
    """The windows of tenants' live bookings of whole GPUs (class `gpu`; partition changes left
    out) in these pools (every pool when None) that meet `window`."""
    stmt = select(bookings.c.starts_at, bookings.c.ends_at, bookings.c.allocation_id).where(
        bookings.c["class"] == "gpu",
        bookings.c.state == "live",
        or_(bookings.c.ends_at.is_(None), bookings.c.ends_at > window.start),
    )
    if window.end is not None:
        stmt = stmt.where(bookings.c.starts_at < window.end)
    if pool_ids is not None:
        stmt = stmt.where(bookings.c.pool_id.in_(list(pool_ids)))
    return [
        Window(start, end)
        for start, end, allocation in conn.execute(stmt)
        if not is_partition_change(allocation)
    ]


def partition_holds(conn: Connection, since: datetime) -> list[Booking]:
    """Live bookings of partition changes (allocation id `partition:...`) that end after `since`
    (or never), in id order."""
    stmt = (
        select(bookings)
        .where(
            bookings.c.allocation_id.startswith(PARTITION_PREFIX, autoescape=True),
            bookings.c.state == "live",
            or_(bookings.c.ends_at.is_(None), bookings.c.ends_at > since),
        )
        .order_by(bookings.c.id)
    )
    return [_row_to_booking(r) for r in conn.execute(stmt)]


def overlaps(conn: Connection, limit: int) -> list[tuple[Booking, Booking]]:
    """Pairs of live bookings of one atom whose windows meet, at most `limit` of them; the first of
    each pair starts first (or, starting together, has the lower id).

    There should be none: PostgreSQL's `bookings_no_overlap` refuses them, and SQLite's serialised
    writers check before they insert. It is `better-compute doctor`'s self-check of the ledger. Each
    booking is paired with those starting inside its window, a range of the (atom, start) index."""
    a, b = bookings.alias("a"), bookings.alias("b")
    stmt = (
        select(*(a.c[c].label(f"a_{c}") for c in _PAIR), *(b.c[c].label(f"b_{c}") for c in _PAIR))
        .select_from(a)
        .join(b, b.c.atom_id == a.c.atom_id)
        .where(
            a.c.state == "live",
            b.c.state == "live",
            a.c.id != b.c.id,
            b.c.starts_at >= a.c.starts_at,
            or_(b.c.starts_at > a.c.starts_at, b.c.id > a.c.id),
            or_(a.c.ends_at.is_(None), b.c.starts_at < a.c.ends_at),
        )
        .order_by(a.c.id, b.c.id)
        .limit(limit)
    )
    return [(_paired(r._mapping, "a_"), _paired(r._mapping, "b_")) for r in conn.execute(stmt)]


_PAIR = ("id", "atom_id", "gpu_id", "allocation_id", "tenant_id", "starts_at", "ends_at", "state")


def family_overlaps(conn: Connection, since: datetime, limit: int) -> list[tuple[Booking, Booking]]:
    """Pairs of live bookings reaching past `since` of atoms of one GPU that exclude each other
    (`domain.ledger.ledger.family_excludes`: different classes, different allocations) whose windows meet,
    at most `limit`; the first of each pair is of the lesser class (the whole GPU, `gpu`, when one
    is). There should be none: PostgreSQL's `bookings_no_family_overlap` refuses them and SQLite's
    writers look for them. Read through the live bookings by GPU."""
    a, b = bookings.alias("a"), bookings.alias("b")
    stmt = (
        select(*(a.c[c].label(f"a_{c}") for c in _PAIR), *(b.c[c].label(f"b_{c}") for c in _PAIR))
        .select_from(a)
        .join(
            b,
            and_(
                b.c.gpu_id == a.c.gpu_id,
                b.c["class"] > a.c["class"],
                b.c.allocation_id != a.c.allocation_id,
            ),
        )
        .where(
            _reaching(conn, a, since),
            _reaching(conn, b, since),
            or_(a.c.ends_at.is_(None), b.c.starts_at < a.c.ends_at),
            or_(b.c.ends_at.is_(None), a.c.starts_at < b.c.ends_at),
        )
        .order_by(a.c.id, b.c.id)
        .limit(limit)
    )
    return [(_paired(r._mapping, "a_"), _paired(r._mapping, "b_")) for r in conn.execute(stmt)]


def _reaching(conn: Connection, table: Any, since: datetime) -> ColumnElement[bool]:
    """`reaching_past` for an alias of the bookings table."""
    live = table.c.state == "live"
    return and_(live, or_(table.c.ends_at.is_(None), table.c.ends_at > since))


def stranded(conn: Connection, now: datetime, limit: int) -> list[StrandedBooking]:
    """Tenants' live bookings not over at `now` of atoms they cannot have: gone from their node, not
    bookable, or in another pool than the booking's (`domain.fleet.bindings.stranded_why`), each with
    its atom as it is now; at most `limit`, in booking order."""
    booked = [
        bookings.c.id.label("b_id"),
        bookings.c.atom_id.label("b_atom_id"),
        bookings.c.gpu_id.label("b_gpu_id"),
        bookings.c.allocation_id.label("b_allocation_id"),
        bookings.c.tenant_id.label("b_tenant_id"),
        bookings.c.starts_at.label("b_starts_at"),
        bookings.c.ends_at.label("b_ends_at"),
        bookings.c.state.label("b_state"),
        bookings.c.pool_id.label("b_pool_id"),
    ]
    stmt = (
        select(*booked, atoms)
        .select_from(bookings.join(atoms, atoms.c.id == bookings.c.atom_id))
        .where(
            reaching_past(conn, now),
            bookings.c.tenant_id.is_not(None),
            or_(
                atoms.c.present.is_(False),
                atoms.c.bookable.is_(False),
                atoms.c.pool_id.is_distinct_from(bookings.c.pool_id),
            ),
        )
        .order_by(bookings.c.id)
        .limit(limit)
    )
    return [
        StrandedBooking(_paired(r._mapping, "b_"), r._mapping["b_pool_id"], atom_of(r._mapping))
        for r in conn.execute(stmt)
    ]


def _paired(r: Mapping[Any, Any], prefix: str) -> Booking:
    return Booking(
        id=booking_id(r[f"{prefix}id"]),
        atom_id=r[f"{prefix}atom_id"],
        gpu_id=r[f"{prefix}gpu_id"],
        allocation_id=r[f"{prefix}allocation_id"],
        tenant_id=r[f"{prefix}tenant_id"],
        span=Window(r[f"{prefix}starts_at"], r[f"{prefix}ends_at"]),
        state=r[f"{prefix}state"],
    )


class SqlLedger:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def book(
        self,
        atom_ids: Sequence[str],
        span: Window,
        allocation_id: str,
        tenant_id: str | None,
        now: datetime,
        *,
        require_bookable: bool = True,
    ) -> int:
        return book(
            self.conn, atom_ids, span, allocation_id, tenant_id, now, require_bookable=require_bookable
        )

    def try_book(
        self, atom_ids: Sequence[str], span: Window, allocation_id: str, tenant_id: str | None, now: datetime
    ) -> bool:
        return try_book(self.conn, atom_ids, span, allocation_id, tenant_id, now)

    def busy_spans(self, atom_ids: Sequence[str], since: datetime) -> list[Window]:
        return busy_spans(self.conn, atom_ids, since)

    def taking_spans(self, atom_ids: Sequence[str], since: datetime) -> list[Window]:
        return taking_spans(self.conn, atom_ids, since)

    def live_on(self, atom_ids: Sequence[str], since: datetime) -> list[LiveBooking]:
        return live_bookings(self.conn, since, atom_ids) if atom_ids else []

    def tenants_booked_until(self, node_id: str, since: datetime) -> tuple[datetime | None, bool]:
        return tenants_booked_until(self.conn, node_id, since)

    def book_holds(self, groups: Mapping[str, Sequence[str]], span: Window, now: datetime) -> int:
        return book_holds(self.conn, groups, span, now)

    def allocation_bookings(self, allocation_id: str) -> list[Booking]:
        return allocation_bookings(self.conn, allocation_id)

    def nodes_booked_by(self, allocation_ids: Sequence[str]) -> set[str]:
        return nodes_booked_by(self.conn, allocation_ids)

    def booking_allocation(self, booking_id: str) -> str | None:
        return booking_allocation(self.conn, booking_id)

    def end_allocation(self, allocation_id: str, now: datetime, event: Event) -> int:
        return end_allocation(self.conn, allocation_id, now, event)

    def cancel_allocation(self, allocation_id: str, now: datetime) -> int:
        return cancel_allocation(self.conn, allocation_id, now)

    def rebind(self, moves: Sequence[tuple[str, str, str]], now: datetime, events: Sequence[Event]) -> int:
        return rebind(self.conn, moves, now, events)

    def extend_allocation(self, allocation_id: str, end: datetime, event: Event, now: datetime) -> int:
        return extend_allocation(self.conn, allocation_id, end, event, now)

    def family_atom_ids(self, gpu_id: str) -> list[str]:
        return family_atom_ids(self.conn, gpu_id)

    def live_bookings(self, since: datetime) -> list[LiveBooking]:
        return live_bookings(self.conn, since)

    def whole_gpus_held(self, pool_ids: Sequence[str] | None, window: Window) -> list[Window]:
        return whole_gpus_held(self.conn, pool_ids, window)

    def any_ended_between(self, after: datetime, until: datetime) -> bool:
        """Whether a live booking's end falls in (after, until]: time alone freed its atom."""
        stmt = (
            select(bookings.c.id)
            .where(bookings.c.state == "live", bookings.c.ends_at > after, bookings.c.ends_at <= until)
            .limit(1)
        )
        return self.conn.execute(stmt).first() is not None

    def partition_holds(self, since: datetime) -> list[Booking]:
        return partition_holds(self.conn, since)

    def overlaps(self, limit: int) -> list[tuple[Booking, Booking]]:
        return overlaps(self.conn, limit)

    def family_overlaps(self, since: datetime, limit: int) -> list[tuple[Booking, Booking]]:
        return family_overlaps(self.conn, since, limit)

    def stranded(self, now: datetime, limit: int) -> list[StrandedBooking]:
        return stranded(self.conn, now, limit)
