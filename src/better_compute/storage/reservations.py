"""SQL for reservations: idempotency look-ups, quota windows, the event tail and live bookings."""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import Connection, func, or_, select

from better_compute.domain.timewin import Window
from better_compute.service.event_tail import PAGE, Cursor, LogSnapshot
from better_compute.service.ports import KeyTaken, NotBookable
from better_compute.storage import ledger, pg_simple
from better_compute.storage.inventory import rows
from better_compute.storage.ledger import sqlite_time
from better_compute.storage.tables import atoms, bookings, events

Row = dict[str, Any]


_PG_LOCK = "SELECT pg_advisory_xact_lock(%s::bigint)"


def lock(conn: Connection, key: str) -> None:
    """A transaction-scoped advisory lock on PostgreSQL; SQLite writers are serialised already."""
    if conn.dialect.name == "postgresql":
        pg_simple.cursor(conn).execute(_PG_LOCK, (_lock_id(key),), prepare=True)


def _lock_id(key: str) -> int:
    return zlib.crc32(key.encode()) - 2**31


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


_PG_TAIL_EVENTS = (
    # The events after `last` (one page of ids), and those at or below it written by a transaction
    # that could still commit then (service.event_tail): one of `open`, or one from `from` on. Each
    # part is shaped to be looked up by its own index under a generic plan: a bare `tx >= $from`
    # looks to the planner as broad as `id <= $last`, and it would scan every event below `last`
    # (a transaction id 2^31 past `from` cannot occur between two reads), and `id + 0` keeps the
    # id index out of the transactions' parts. An event both parts find is taken once
    # (service.event_tail).
    "(SELECT coalesce(json_agg(json_build_object('id', id, 'type', type, 'subject', subject,"
    " 'payload', payload, 'tx', tx) ORDER BY id), '[]')"
    " FROM ((SELECT * FROM events WHERE id > %(last)s::bigint AND id <= %(last)s::bigint + %(limit)s::bigint)"
    " UNION ALL (SELECT * FROM events WHERE tx = ANY(%(open)s::bigint[]) AND id + 0 <= %(last)s::bigint)"
    " UNION ALL (SELECT * FROM events WHERE tx >= %(from)s::bigint"
    " AND tx < %(from)s::bigint + 2147483648 AND id + 0 <= %(last)s::bigint)) ev)"
)
_PG_TAIL_STATE = (
    # The log's last id, and what this statement's snapshot could not see: transactions from `xmax`
    # on, and those in progress.
    "(SELECT coalesce(max(id), 0) FROM events),"
    " pg_snapshot_xmax(pg_current_snapshot())::text::bigint,"
    " (SELECT coalesce(json_agg(x::text::bigint), '[]') FROM pg_snapshot_xip(pg_current_snapshot()) x)"
)


def log_snapshot(xmax: int | None, in_progress: Sequence[int] | None) -> LogSnapshot:
    return LogSnapshot(None if xmax is None else int(xmax), frozenset(int(x) for x in in_progress or ()))


def tail_start(conn: Connection) -> tuple[int, LogSnapshot]:
    """The log's last id and the snapshot it was read in, to start tailing from."""
    if conn.dialect.name == "postgresql":
        newest, xmax, in_progress = conn.exec_driver_sql("SELECT " + _PG_TAIL_STATE).one()
        return int(newest), log_snapshot(xmax, in_progress)
    return int(conn.execute(select(func.coalesce(func.max(events.c.id), 0))).scalar_one()), LogSnapshot()


def _tail_params(read: Cursor) -> dict[str, Any]:
    return {"last": read.last, "limit": EVENT_PAGE, "open": list(read.open), "from": read.from_xid}


def events_after(conn: Connection, read: Cursor) -> tuple[list[Row], int, LogSnapshot]:
    """What a read of the log from `read` finds (see service.event_tail): the events, the log's last
    id, and the read's snapshot."""
    if conn.dialect.name == "postgresql":
        found, newest, xmax, in_progress = pg_simple.cursor(conn).execute(
            "SELECT " + _PG_TAIL_EVENTS + ", " + _PG_TAIL_STATE, _tail_params(read)
        ).fetchone() or ([], 0, None, [])
        return list(found), int(newest), log_snapshot(xmax, in_progress)
    page = select(events).where(events.c.id > read.last, events.c.id <= read.last + EVENT_PAGE)
    found = rows(conn, page.order_by(events.c.id))
    newest = int(conn.execute(select(func.coalesce(func.max(events.c.id), 0))).scalar_one())
    return found, newest, LogSnapshot()


def live_bookings(conn: Connection, since: datetime) -> list[Row]:
    stmt = select(
        bookings.c.allocation_id,
        bookings.c.atom_id,
        bookings.c.starts_at,
        bookings.c.ends_at,
        bookings.c.tenant_id,
        bookings.c.pool_id,
        bookings.c["class"],
    ).where(bookings.c.state == "live", or_(bookings.c.ends_at.is_(None), bookings.c.ends_at > since))
    return rows(conn, stmt)


# -- The admission hot path ----------------------------------------------------------------------
# Admitting a reservation reads a handful of small things and writes a handful of rows. Built with
# SQLAlchemy's expression language that is a dozen statements and most of the request's time, so
# here it is one read statement and one write statement per dialect, straight to the driver.

_PG_SNAPSHOT = (
    "SELECT"
    " (SELECT id FROM reservations WHERE tenant_id = %(t)s AND idempotency_key = %(k)s::text),"
    " (SELECT json_build_object('mode', mode, 'owner', owner_tenant_id) FROM pools WHERE id = %(p)s),"
    " EXISTS (SELECT 1 FROM tenants WHERE id = %(t)s),"
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
  (SELECT json_object('mode', mode, 'owner', owner_tenant_id) FROM pools WHERE id = :p),
  EXISTS (SELECT 1 FROM tenants WHERE id = :t),
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

EVENT_PAGE = PAGE
"""The tail is read as an id range rather than `id > last LIMIT n`: PostgreSQL's generic plan for a
prepared statement cannot see that `last` is near the end and would scan the whole events table."""


def admission_snapshot(
    conn: Connection,
    tenant_id: str,
    pool_id: str,
    key: str | None,
    read: Cursor,
    lock_key: str,
    credential_id: str | None = None,
) -> dict[str, Any]:
    """Everything admission reads, in one statement: the replayed reservation id (if any), the pool's
    mode and owner, whether the tenant exists, its policies, its quota rows in the pool, whether
    `credential_id` is a live credential, and a read of the event log from `read` (its events, the
    log's last id and the statement's snapshot, see service.event_tail).

    The transaction first takes the advisory lock `lock_key`, and the read runs after it is granted
    (in its own statement, so that it sees every commit made before the lock was)."""
    params: dict[str, Any] = {
        "t": tenant_id,
        "p": pool_id,
        "k": key,
        "c": credential_id,
        **_tail_params(read),
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
    return {
        "replay_id": replay,
        "pool": pool,
        "tenant_exists": bool(tenant),
        "policies": policies or [],
        "limits": {str(k): int(v) for k, v in (limits or {}).items()},
        "events": tail or [],
        "newest_event": int(newest),
        "log": snapshot,
        "credential_live": None if credential_id is None else bool(live),
    }


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


_PG_COMMIT = (
    # Every part is guarded by `ok` (all the atoms are bookable and still in the pool, counted once),
    # so the statement writes everything or nothing by itself. `l` share-locks the atoms against a
    # concurrent pool change (see ledger.LOCKED_ATOMS_PG).
    "WITH l AS (" + ledger.LOCKED_ATOMS_PG.replace("{bookable}", " AND bookable AND pool_id = %(p)s") + "),"
    " ok AS (SELECT (SELECT count(*) FROM l) = %(n)s::bigint AS yes),"
    " a AS (INSERT INTO allocations (id, kind, tenant_id, pool_id, created_at)"
    " SELECT %(id)s, 'reservation', %(t)s, %(p)s, %(now)s FROM ok WHERE ok.yes),"
    " r AS (INSERT INTO reservations (id, tenant_id, pool_id, status, starts_at, ends_at, devices, gpu_count,"
    " gpu_slices, counts, idempotency_key, fingerprint, generation, created_at) SELECT %(id)s, %(t)s, %(p)s,"
    " %(status)s::text, %(s)s, %(e)s, %(devices)s::json, %(gc)s::int, %(gs)s::int, %(counts)s::json, %(k)s::text,"
    " %(fp)s, %(gen)s::int, %(now)s FROM ok WHERE ok.yes),"
    # Bookings are written in the order the atoms were chosen, so the reservation reads them back so.
    " b AS (INSERT INTO bookings ("
    + ledger.COLUMNS
    + ") SELECT l.id, l.gpu_id, l.pool_id, l.class, %(t)s, %(id)s, %(s)s, %(e)s, 'live', %(now)s"
    " FROM ok, unnest(%(ids)s::text[]) WITH ORDINALITY AS u(id, ord) JOIN l ON l.id = u.id"
    " WHERE ok.yes ORDER BY u.ord"
    " RETURNING atom_id, tenant_id, pool_id, class, starts_at, ends_at),"
    " e AS (INSERT INTO events (type, subject, payload, at)"
    " SELECT 'ledger.booked', %(id)s, " + ledger.BOOKED_PAYLOAD_PG + ", %(now)s FROM b"
    " UNION ALL SELECT 'reservation.created', %(id)s, %(created)s::json, %(now)s FROM ok WHERE ok.yes)"
    " SELECT count(*) FROM b"
)


def commit_reservation(conn: Connection, row: Row, atom_ids: Sequence[str], now: datetime) -> None:
    """Write the reservation, its allocation, its bookings and their events, and commit: it is the
    last step of admission. Raise Overlap or NotBookable (nothing was written), or KeyTaken when the
    idempotency key was taken meanwhile."""
    ids = list(atom_ids)
    span = Window(row["starts_at"], row["ends_at"])
    created = json.dumps({"tenantId": row["tenant_id"], "poolId": row["pool_id"], "atoms": ids})
    db = conn.connection.driver_connection
    assert db is not None
    if conn.dialect.name != "postgresql":
        db.execute(
            "INSERT INTO allocations (id, kind, tenant_id, pool_id, created_at) VALUES (?, 'reservation', ?, ?, ?)",
            (row["id"], row["tenant_id"], row["pool_id"], sqlite_time(now)),
        )
        try:
            db.execute(
                "INSERT INTO reservations (id, tenant_id, pool_id, status, starts_at, ends_at, devices, gpu_count,"
                " gpu_slices, counts, idempotency_key, fingerprint, generation, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    row["id"],
                    row["tenant_id"],
                    row["pool_id"],
                    row["status"],
                    sqlite_time(span.start),
                    sqlite_time(span.end),
                    json.dumps(row["devices"]),
                    row["gpu_count"],
                    row["gpu_slices"],
                    json.dumps(row["counts"]),
                    row["idempotency_key"],
                    row["fingerprint"],
                    row["generation"],
                    sqlite_time(now),
                ),
            )
        except sqlite3.IntegrityError:
            raise _key_taken(row) from None
        written = ledger.book_sqlite(conn, ids, span, row["id"], row["tenant_id"], now, True)
        if written != len(ids):
            raise NotBookable(ledger.unbookable(conn, ids))
        db.execute(
            "INSERT INTO events (type, subject, payload, at) VALUES ('reservation.created', ?, ?, ?)",
            (row["id"], created, sqlite_time(now)),
        )
        return
    params = {
        "id": row["id"],
        "t": row["tenant_id"],
        "p": row["pool_id"],
        "s": span.start,
        "e": span.end,
        "devices": json.dumps(row["devices"]),
        "gc": row["gpu_count"],
        "gs": row["gpu_slices"],
        "counts": json.dumps(row["counts"]),
        "k": row["idempotency_key"],
        "fp": row["fingerprint"],
        "status": row["status"],
        "gen": row["generation"],
        "now": now,
        "ids": ids,
        "n": len(ids),
        "created": created,
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
        raise _key_taken(row) from None
    if result is None or int(result[0]) != len(ids):
        raise NotBookable(ledger.unbookable(conn, ids))


def _key_taken(row: Row) -> KeyTaken:
    return KeyTaken(row["idempotency_key"])
