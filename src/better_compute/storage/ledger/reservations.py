"""The reservations repository: reservation records, and admission's one read and one write.

Admission is the hot path, so its read (`admission_snapshot`) and its write (`commit_reservation`) are
hand-written SQL, one statement each per dialect (ADR 0001, 0004); everything else is ordinary SQL.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import Connection, or_, select

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.pools import check_mode
from better_compute.domain.kernel.events import LoggedEvent
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.events import LedgerBooked, ReservationCreated
from better_compute.domain.ledger.records import Reservation
from better_compute.domain.ledger.reservations import ReservationStatus
from better_compute.service.kernel.event_tail import Cursor, LogSnapshot
from better_compute.service.ledger.ports import AdmissionRead, KeyTaken, NotBookable
from better_compute.storage.fleet.atoms import atom_of
from better_compute.storage.kernel import pg_simple, rows
from better_compute.storage.kernel.events import (
    _PG_TAIL_EVENTS,
    _PG_TAIL_STATE,
    events_after,
    log_snapshot,
    logged,
    tail_params,
)
from better_compute.storage.kernel.tables import atoms, bookings, reservations
from better_compute.storage.ledger import ledger
from better_compute.storage.ledger.ledger import sqlite_time
from better_compute.storage.tenancy.policies import policy_of

_PG_LOCK = "SELECT pg_advisory_xact_lock(%s::bigint)"


def lock(conn: Connection, key: str) -> None:
    """A transaction-scoped advisory lock on PostgreSQL; SQLite writers are serialised already."""
    if conn.dialect.name == "postgresql":
        pg_simple.cursor(conn).execute(_PG_LOCK, (_lock_id(key),), prepare=True)


_PG_TRY_LOCK = "SELECT pg_try_advisory_xact_lock(%s::bigint)"


def try_lock(conn: Connection, key: str) -> bool:
    """`lock` if it is free now, without waiting (True when held); SQLite writers are serialised."""
    if conn.dialect.name != "postgresql":
        return True
    row = pg_simple.cursor(conn).execute(_PG_TRY_LOCK, (_lock_id(key),), prepare=True).fetchone()
    return bool(row and row[0])


def _lock_id(key: str) -> int:
    return zlib.crc32(key.encode()) - 2**31


def held_atoms(conn: Connection, allocation_ids: Sequence[str]) -> dict[str, list[Atom]]:
    out: dict[str, list[Atom]] = {a: [] for a in allocation_ids}
    if not allocation_ids:
        return out
    stmt = (
        select(bookings.c.allocation_id.label("held_by"), atoms)
        .join(atoms, atoms.c.id == bookings.c.atom_id)
        .where(bookings.c.allocation_id.in_(list(allocation_ids)), bookings.c.state == "live")
        .order_by(bookings.c.id)
    )
    for row in rows.rows(conn, stmt):
        out[row["held_by"]].append(atom_of(row))
    return out


def reservation_of(r: Mapping[str, Any]) -> Reservation:
    return Reservation(
        id=r["id"],
        tenant_id=r["tenant_id"],
        pool_id=r["pool_id"],
        status=r["status"],
        starts_at=r["starts_at"],
        ends_at=r["ends_at"],
        devices=tuple(r["devices"] or ()),
        gpu_count=int(r["gpu_count"]),
        gpu_slices=int(r["gpu_slices"]),
        counts={str(k): int(v) for k, v in (r["counts"] or {}).items()},
        fingerprint=r["fingerprint"],
        created_at=r["created_at"],
        idempotency_key=r["idempotency_key"],
        generation=int(r["generation"]),
        preemptible=bool(r.get("preemptible") or False),
    )


class SqlReservations:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def get(self, reservation_id: str) -> Reservation | None:
        found = rows.rows(self.conn, select(reservations).where(reservations.c.id == reservation_id))
        return reservation_of(found[0]) if found else None

    def preemptible_among(self, ids: Sequence[str]) -> list[Reservation]:
        """The reservations of these ids made with `preemptible: true` and not over yet."""
        out: list[Reservation] = []
        wanted = sorted(set(ids))
        for at in range(0, len(wanted), 2_000):
            stmt = select(reservations).where(
                reservations.c.id.in_(wanted[at : at + 2_000]),
                reservations.c.preemptible.is_(True),
                reservations.c.status.in_(("scheduled", "active")),
            )
            out.extend(reservation_of(r) for r in rows.rows(self.conn, stmt))
        return out

    def by_key(self, tenant_id: str, key: str) -> Reservation | None:
        stmt = select(reservations).where(
            reservations.c.tenant_id == tenant_id, reservations.c.idempotency_key == key
        )
        found = rows.rows(self.conn, stmt)
        return reservation_of(found[0]) if found else None

    def page(
        self, tenant_id: str | None, pool_id: str | None, limit: int | None, after: str | None
    ) -> list[Reservation]:
        where = [
            *([] if tenant_id is None else [reservations.c.tenant_id == tenant_id]),
            *([] if pool_id is None else [reservations.c.pool_id == pool_id]),
        ]
        # Newest first: ids are time-ordered, so "after" the cursor means a smaller id.
        if after is not None:
            where.append(reservations.c.id < after)
        found = rows.page(
            self.conn, reservations, where=where, order_by=reservations.c.id.desc(), limit=limit
        )
        return [reservation_of(r) for r in found]

    def compare_and_set(
        self, reservation_id: str, generation: int, status: str, ends_at: datetime | None
    ) -> bool:
        return rows.compare_and_set(
            self.conn,
            reservations,
            reservation_id,
            {"generation": generation},
            {"status": status, "ends_at": ends_at, "generation": generation + 1},
        )

    def lock(self, key: str) -> None:
        lock(self.conn, key)

    def try_lock(self, key: str) -> bool:
        return try_lock(self.conn, key)

    def locked_tail(self, key: str, read: Cursor) -> tuple[list[LoggedEvent], int, LogSnapshot]:
        return locked_tail(self.conn, key, read)

    def held_atoms(self, allocation_ids: Sequence[str]) -> dict[str, list[Atom]]:
        return held_atoms(self.conn, allocation_ids)

    def live_of_tenant(self, tenant_id: str, now: datetime, limit: int) -> list[Reservation]:
        stmt = (
            select(reservations)
            .where(
                reservations.c.tenant_id == tenant_id,
                reservations.c.status.in_(
                    [ReservationStatus.SCHEDULED.value, ReservationStatus.ACTIVE.value]
                ),
                or_(reservations.c.ends_at.is_(None), reservations.c.ends_at > now),
            )
            .order_by(reservations.c.id)
            .limit(limit)
        )
        return [reservation_of(r) for r in rows.rows(self.conn, stmt)]

    def snapshot(
        self,
        tenant_id: str,
        pool_id: str,
        key: str | None,
        read: Cursor,
        lock_key: str,
        credential_id: str | None = None,
    ) -> AdmissionRead:
        return admission_snapshot(self.conn, tenant_id, pool_id, key, read, lock_key, credential_id)

    def commit(
        self, reservation: Reservation, atom_ids: Sequence[str], now: datetime, *, scrub: bool = False
    ) -> None:
        commit_reservation(self.conn, reservation, atom_ids, now, scrub=scrub)


# -- The admission hot path ----------------------------------------------------------------------
# Admitting a reservation reads a handful of small things and writes a handful of rows. Built with
# SQLAlchemy's expression language that is a dozen statements and most of the request's time, so
# here it is one read statement and one write statement per dialect, straight to the driver.

_PG_SNAPSHOT = (
    "SELECT"
    " (SELECT id FROM reservations WHERE tenant_id = %(t)s AND idempotency_key = %(k)s::text),"
    " (SELECT json_build_object('mode', mode, 'owner', owner_tenant_id, 'maxDuration', policy->>'maxDuration', 'scrub', policy->>'scrub')"
    " FROM pools WHERE id = %(p)s),"
    " EXISTS (SELECT 1 FROM tenants WHERE id = %(t)s AND deleted_at IS NULL),"
    " (SELECT coalesce(json_agg(json_build_object('name', name, 'pool_id', pool_id, 'limits', limits)), '[]')"
    " FROM policies WHERE tenant_id = %(t)s),"
    " (SELECT coalesce(json_object_agg(class, \"limit\"), '{}') FROM quotas WHERE tenant_id = %(t)s AND pool_id = %(p)s),"
    " (SELECT revoked_at IS NULL FROM credentials WHERE id = %(c)s::text), "
    + _PG_TAIL_EVENTS
    + ", "
    + _PG_TAIL_STATE
)

_SQLITE_SNAPSHOT = """
SELECT
  (SELECT id FROM reservations WHERE tenant_id = :t AND idempotency_key = :k),
  (SELECT json_object('mode', mode, 'owner', owner_tenant_id, 'maxDuration', json_extract(policy, '$.maxDuration'),
                    'scrub', json_extract(policy, '$.scrub'))
     FROM pools WHERE id = :p),
  EXISTS (SELECT 1 FROM tenants WHERE id = :t AND deleted_at IS NULL),
  (SELECT json_group_array(json_object('name', name, 'pool_id', pool_id, 'limits', json(limits)))
     FROM policies WHERE tenant_id = :t),
  (SELECT json_group_object(class, "limit") FROM quotas WHERE tenant_id = :t AND pool_id = :p),
  (SELECT revoked_at IS NULL FROM credentials WHERE id = :c),
  (SELECT json_group_array(json_object('id', id, 'type', type, 'subject', subject, 'payload', json(payload)))
     FROM (SELECT * FROM events WHERE id > :last AND id <= :last + :limit ORDER BY id)),
  (SELECT coalesce(max(id), 0) FROM events)
"""

# How the admission transaction's statements are planned. Both are prepared once per connection and
# then run thousands of times a second, so they must keep one cheap plan whatever the planner's
# statistics say:
# - force_generic_plan: with `= ANY($ids)` the generic plan's estimate looks worse than a custom
#   plan's, so PostgreSQL would plan the write afresh on every execution (about a millisecond each).
# - enable_seqscan off: every read here is a point or short-range look-up by an index. Statistics
#   taken when a table was nearly empty (a fresh install, a server with autovacuum off) make a scan of
#   the whole table look cheaper, and the cached plan would then keep scanning as the table grows.
# Both are transaction-local (`set_config(..., true)`) and ride with the lock: no extra round trip.
_PLAN = "set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true)"
_PG_LOCK_AND_PLAN = _PG_LOCK + ", " + _PLAN


def admission_snapshot(
    conn: Connection,
    tenant_id: str,
    pool_id: str,
    key: str | None,
    read: Cursor,
    lock_key: str,
    credential_id: str | None = None,
) -> AdmissionRead:
    """Everything admission reads, in one statement: the replayed reservation id (if any), the pool's
    mode and owner, whether the tenant exists, its policies, its quota rows in the pool, whether
    `credential_id` is a live credential, and a read of the event log from `read` (its events, the
    log's last id and the statement's snapshot, see service.kernel.event_tail).

    The transaction first takes the advisory lock `lock_key`, and the read runs after it is granted
    (in its own statement, so that it sees every commit made before the lock was)."""
    params: dict[str, Any] = {
        "t": tenant_id,
        "p": pool_id,
        "k": key,
        "c": credential_id,
        **tail_params(read),
    }
    if conn.dialect.name == "postgresql":
        row = _pg_snapshot_batch(conn, params, lock_key)
        if row is None:
            cur = pg_simple.cursor(conn)
            cur.execute(_PG_LOCK_AND_PLAN, (_lock_id(lock_key),), prepare=True)
            cur.execute(_PG_SNAPSHOT, params, prepare=True)
            row = cur.fetchone()
            assert row is not None
        replay, pool, tenant, policies, limits, live, tail, newest, xmax, in_progress = row
        snapshot = log_snapshot(xmax, in_progress)
    else:
        db = conn.connection.driver_connection
        assert db is not None
        sqlite_params = {k: params[k] for k in ("t", "p", "k", "c", "last", "limit")}
        row = db.execute(_SQLITE_SNAPSHOT, sqlite_params).fetchone()
        replay, tenant, live, newest = row[0], row[2], row[5], row[7]
        pool, policies, limits, tail = (_json(v) for v in (row[1], row[3], row[4], row[6]))
        snapshot = LogSnapshot()
    return AdmissionRead(
        replay_id=replay,
        pool_mode=None if pool is None else check_mode(pool["mode"]),
        pool_owner=None if pool is None else pool["owner"],
        pool_max_duration=None if pool is None else pool.get("maxDuration"),
        pool_scrub=None if pool is None else pool.get("scrub"),
        tenant_exists=bool(tenant),
        policies=[policy_of({**p, "tenant_id": tenant_id}) for p in policies or ()],
        limits={str(k): int(v) for k, v in (limits or {}).items()},
        credential_live=None if credential_id is None else bool(live),
        events=logged(tail or ()),
        newest_event=int(newest),
        log=snapshot,
    )


_SNAPSHOT = pg_simple.Statement(
    "bc_admission_snapshot",
    _PG_SNAPSHOT,
    {
        "t": "text",
        "p": "text",
        "k": "text",
        "c": "text",
        "last": "bigint",
        "limit": "bigint",
        "open": "bigint[]",
        "from": "bigint",
    },
)
_LOCK = pg_simple.Statement(
    "bc_admission_lock", "SELECT pg_advisory_xact_lock(%(key)s), " + _PLAN, {"key": "bigint"}
)
_BATCHED = (_LOCK, _SNAPSHOT)
_EXECUTE_LOCK = f"EXECUTE {_LOCK.name} (%d)".encode()
_EXECUTE_SNAPSHOT = _SNAPSHOT.execute


def _json(value: str | bytes | None) -> Any:
    return None if value is None else json.loads(value)


def _pg_snapshot_batch(conn: Connection, params: dict[str, Any], lock_key: str) -> tuple[Any, ...] | None:
    """The snapshot as one round trip that also begins the transaction and takes the lock (see
    `pg_simple`), as the columns the driver would give; None when this transaction already began
    (it is read the usual way then)."""
    db = pg_simple.driver(conn)
    for _ in range(2):
        if not pg_simple.may_begin(db):
            return None
        pg_simple.ensure_prepared(conn, db, _BATCHED)
        lock = _EXECUTE_LOCK % _lock_id(lock_key)
        batch = (
            pg_simple.begin(db) + b"; " + lock + b"; " + pg_simple.quote(conn, db, _EXECUTE_SNAPSHOT, params)
        )
        try:
            result = pg_simple.run(conn, batch)
        except pg_simple.Lost:
            continue
        replay, pool, tenant, policies, limits, live, tail, newest, xmax, in_progress = (
            result.get_value(0, n) for n in range(10)
        )
        return (
            None if replay is None else replay.decode(),
            _json(pool),
            tenant == b"t",
            _json(policies),
            _json(limits),
            None if live is None else live == b"t",
            _json(tail),
            newest,
            None if xmax is None else int(xmax),
            _json(in_progress),
        )
    return None


_TAIL = pg_simple.Statement(
    "bc_locked_tail",
    "SELECT " + _PG_TAIL_EVENTS + ", " + _PG_TAIL_STATE,
    {"last": "bigint", "limit": "bigint", "open": "bigint[]", "from": "bigint"},
)
_PLAIN_LOCK = pg_simple.Statement("bc_plain_lock", "SELECT pg_advisory_xact_lock(%(key)s)", {"key": "bigint"})
"""The lock alone: admission's planner settings (`_PLAN`) are tuned for its own statements, not for
the rest of a workload write's transaction."""
_LOCKED_TAIL = (_PLAIN_LOCK, _TAIL)
_EXECUTE_PLAIN_LOCK = f"EXECUTE {_PLAIN_LOCK.name} (%d)".encode()


def locked_tail(conn: Connection, lock_key: str, read: Cursor) -> tuple[list[LoggedEvent], int, LogSnapshot]:
    """Take the advisory lock `lock_key`, then read the event log from `read` (as
    `events.events_after`) in a statement of its own, so that it sees every commit made before the
    lock was granted. On PostgreSQL, when the transaction has not begun yet, BEGIN, the lock and
    the read are one round trip (see `pg_simple`). Called before the transaction writes anything:
    a read after its own writes would show its own uncommitted events."""
    if conn.dialect.name == "postgresql":
        db = pg_simple.driver(conn)
        for _ in range(2):
            if not pg_simple.may_begin(db):
                break
            pg_simple.ensure_prepared(conn, db, _LOCKED_TAIL)
            batch = (
                pg_simple.begin(db)
                + b"; "
                + _EXECUTE_PLAIN_LOCK % _lock_id(lock_key)
                + b"; "
                + pg_simple.quote(conn, db, _TAIL.execute, tail_params(read))
            )
            try:
                result = pg_simple.run(conn, batch)
            except pg_simple.Lost:
                continue
            tail, newest, xmax, in_progress = (result.get_value(0, n) for n in range(4))
            return (
                logged(_json(tail) or ()),
                int(newest or 0),
                log_snapshot(None if xmax is None else int(xmax), _json(in_progress)),
            )
    lock(conn, lock_key)
    return events_after(conn, read)


_PG_COMMIT = (
    # Every part is guarded by `ok` (all the atoms are bookable and still in the pool, counted once),
    # so the statement writes everything or nothing by itself. `l` share-locks the atoms against a
    # concurrent pool change (see ledger.LOCKED_ATOMS_PG), and, in a pool that scrubs between tenants
    # (`scrub`), against a release by another tenant that came first: the release marks the rows
    # (storage.fleet.atoms.mark_released), and a row re-read after the lock was waited for no longer matches.
    "WITH l AS ("
    + ledger.LOCKED_ATOMS_PG.replace(
        "{bookable}",
        " AND bookable AND pool_id = %(p)s AND NOT (%(scrub)s::boolean AND released_by IS NOT NULL"
        " AND released_by <> %(t)s AND (scrubbed_at IS NULL OR released_at > scrubbed_at))",
    )
    + "),"
    " ok AS (SELECT (SELECT count(*) FROM l) = %(n)s::bigint AS yes),"
    " a AS (INSERT INTO allocations (id, kind, tenant_id, pool_id, created_at)"
    " SELECT %(id)s, 'reservation', %(t)s, %(p)s, %(now)s FROM ok WHERE ok.yes),"
    " r AS (INSERT INTO reservations (id, tenant_id, pool_id, status, starts_at, ends_at, devices, gpu_count,"
    " gpu_slices, counts, idempotency_key, fingerprint, generation, created_at, preemptible) SELECT %(id)s,"
    " %(t)s, %(p)s, %(status)s::text, %(s)s, %(e)s, %(devices)s::json, %(gc)s::int, %(gs)s::int,"
    " %(counts)s::json, %(k)s::text, %(fp)s, %(gen)s::int, %(now)s, %(pre)s::boolean FROM ok WHERE ok.yes),"
    # Bookings are written in the order the atoms were chosen, so the reservation reads them back so.
    " b AS (INSERT INTO bookings ("
    + ledger.COLUMNS
    + ") SELECT l.id, l.gpu_id, l.pool_id, l.class, l.gpu_share, %(t)s, %(id)s, %(s)s, %(e)s, 'live', %(now)s"
    " FROM ok, unnest(%(ids)s::text[]) WITH ORDINALITY AS u(id, ord) JOIN l ON l.id = u.id"
    " WHERE ok.yes ORDER BY u.ord"
    " RETURNING atom_id, tenant_id, pool_id, class, starts_at, ends_at, gpu_id),"
    " e AS (INSERT INTO events (type, subject, payload, at)"
    " SELECT '" + LedgerBooked.TYPE + "', %(id)s, " + ledger.BOOKED_PAYLOAD_PG + ", %(now)s FROM b"
    " UNION ALL SELECT '"
    + ReservationCreated.TYPE
    + "', %(id)s, %(created)s::json, %(now)s FROM ok WHERE ok.yes)"
    " SELECT count(*) FROM b"
)


def commit_reservation(
    conn: Connection, r: Reservation, atom_ids: Sequence[str], now: datetime, *, scrub: bool = False
) -> None:
    """Write the reservation, its allocation, its bookings and their events, and commit: it is the
    last step of admission. Raise Overlap or NotBookable (nothing was written), or KeyTaken when the
    idempotency key was taken meanwhile. `scrub`: the pool scrubs between tenants, so an atom
    another tenant released and the node has not scrubbed since is not booked (NotBookable) even
    when that release committed while this statement waited for the atom's lock (SQLite's writers
    are serialised: admission's own look-up, in this transaction, is the last word there)."""
    ids = list(atom_ids)
    span = Window(r.starts_at, r.ends_at)
    created = json.dumps(ReservationCreated(r.id, r.tenant_id, r.pool_id, tuple(ids), r.ends_at).payload())
    db = conn.connection.driver_connection
    assert db is not None
    if conn.dialect.name != "postgresql":
        db.execute(
            "INSERT INTO allocations (id, kind, tenant_id, pool_id, created_at) VALUES (?, 'reservation', ?, ?, ?)",
            (r.id, r.tenant_id, r.pool_id, sqlite_time(now)),
        )
        try:
            db.execute(
                "INSERT INTO reservations (id, tenant_id, pool_id, status, starts_at, ends_at, devices, gpu_count,"
                " gpu_slices, counts, idempotency_key, fingerprint, generation, created_at, preemptible)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    r.id,
                    r.tenant_id,
                    r.pool_id,
                    r.status,
                    sqlite_time(span.start),
                    sqlite_time(span.end),
                    json.dumps(list(r.devices)),
                    r.gpu_count,
                    r.gpu_slices,
                    json.dumps(dict(r.counts)),
                    r.idempotency_key,
                    r.fingerprint,
                    r.generation,
                    sqlite_time(now),
                    r.preemptible,
                ),
            )
        except sqlite3.IntegrityError:
            raise KeyTaken(r.idempotency_key) from None
        written = ledger.book_sqlite(conn, ids, span, r.id, r.tenant_id, now, True)
        if written != len(ids):
            raise NotBookable(ledger.unbookable(conn, ids))
        db.execute(
            "INSERT INTO events (type, subject, payload, at) VALUES (?, ?, ?, ?)",
            (ReservationCreated.TYPE, r.id, created, sqlite_time(now)),
        )
        return
    params = {
        "id": r.id,
        "t": r.tenant_id,
        "p": r.pool_id,
        "s": span.start,
        "e": span.end,
        "devices": json.dumps(list(r.devices)),
        "gc": r.gpu_count,
        "gs": r.gpu_slices,
        "counts": json.dumps(dict(r.counts)),
        "k": r.idempotency_key,
        "fp": r.fingerprint,
        "status": r.status,
        "gen": r.generation,
        "now": now,
        "pre": r.preemptible,
        "ids": ids,
        "n": len(ids),
        "created": created,
        "scrub": scrub,
    }
    try:
        cur = pg_simple.cursor(conn)
        cur.execute(_PG_COMMIT, params, prepare=True)
        result = cur.fetchone()
        db.commit()
    except psycopg.errors.ExclusionViolation as exc:
        raise ledger.overlap_from(exc) from None
    except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
        raise ledger.contended() from None
    except psycopg.errors.UniqueViolation:
        raise KeyTaken(r.idempotency_key) from None
    if result is None or int(result[0]) != len(ids):
        raise NotBookable(ledger.unbookable(conn, ids))
