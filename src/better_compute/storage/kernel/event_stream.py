"""The events stream: pages of the event log in an order no later commit can get in front of.

On SQLite writers commit one at a time, so events become visible in id order and the stream is the
log by id. On PostgreSQL an event's id is handed out when it is written, not when its transaction
commits: event 12 can be visible while event 11 is still to commit. A cursor that moved past 12
would never see 11. So on PostgreSQL the stream holds only *settled* events, those whose transaction
(`events.tx`) is older than every transaction still in progress in the database: no event of such
a transaction can still appear. It serves them by (transaction, id). Every transaction that can
still write events is at least that old, so whatever settles later sorts after everything
already served: a cursor skips nothing and repeats nothing, and a rolled-back transaction holds the
stream up only until it ends. Events logged before transactions were recorded (`tx` NULL) come
first, by id.

A transaction that stays open (a stalled client holding one) holds back the events committed after
it started until it ends; the booking index does not wait for it (service.kernel.event_tail), only this
stream does.

A tenant's page is filtered here by the table of `domain.ops.audience`, so a page holds only what the
reader may read and a cursor never lands on someone else's event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Select,
    and_,
    false,
    func,
    literal_column,
    or_,
    select,
    true,
)

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.events import Event, StreamedEvent, UnknownEvent
from better_compute.domain.ops import audience as aud
from better_compute.domain.ops.event_types import parse_event
from better_compute.service.kernel.ports import LogPosition
from better_compute.storage.kernel.tables import events, pools, reservations

_SETTLED_BELOW: ColumnElement[int] = literal_column(
    "(SELECT least(pg_snapshot_xmax(pg_current_snapshot())::text::bigint,"
    " (SELECT min(x::text::bigint) FROM pg_snapshot_xip(pg_current_snapshot()) x"
    " WHERE x::xid NOT IN (SELECT backend_xid FROM pg_stat_activity"
    " WHERE backend_xid IS NOT NULL AND datname IS DISTINCT FROM current_database()))))",
    BigInteger,
)
"""The oldest transaction that may still write events, as the statement's snapshot sees it
(PostgreSQL): the oldest one in progress, or every one from the snapshot's `xmax` on when none is.

Transaction ids are the whole server's, so the snapshot also lists transactions of other databases,
which cannot write this log: those `pg_stat_activity` shows in another database are left out, and a
long transaction elsewhere does not hold this stream back. One it does not show (its session is
hidden from this role without `pg_read_all_stats`, or it ended since the snapshot) is counted, which
only makes the stream wait for it."""


_COLUMNS = (events.c.id, events.c.type, events.c.subject, events.c.payload, events.c.at)
"""What a streamed event is read from."""


def _postgres(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


def position(conn: Connection, event_id: int) -> LogPosition | None:
    found = conn.execute(select(events.c.tx).where(events.c.id == event_id)).first()
    return None if found is None else LogPosition(found[0], event_id)


def _event(row: Mapping[str, Any]) -> Event:
    """The stored event, parsed; one whose payload this version cannot read (a stored value of the
    wrong kind) is shown as stored rather than failing the whole page."""
    try:
        return parse_event(row["type"], row["subject"], row["payload"])
    except InvalidInput:
        return UnknownEvent(row["subject"], row["type"], dict(row["payload"] or {}))


def _streamed(rows: Sequence[Mapping[str, Any]]) -> list[StreamedEvent]:
    return [StreamedEvent(int(r["id"]), r["at"], _event(r)) for r in rows]


def _readable(reader: aud.Reader) -> ColumnElement[bool]:
    """The events `reader` may read (domain.ops.audience), as a condition on the events table."""
    if reader.is_admin:
        return true()
    tenant = reader.tenant_id
    parts: list[ColumnElement[bool]] = []
    for audience, types in aud.audiences().items():
        match audience:
            case aud.NamedInPayload(key):
                whose: ColumnElement[bool] = events.c.payload[key].as_string() == tenant
            case aud.SubjectIsTenant():
                whose = events.c.subject == tenant
            case aud.SubjectIsReservation():
                whose = events.c.subject.in_(
                    select(reservations.c.id).where(reservations.c.tenant_id == tenant)
                )
            case aud.SubjectIsPool():
                if not reader.pool_ids:
                    continue
                since = select(pools.c.created_at).where(pools.c.id == events.c.subject).scalar_subquery()
                whose = and_(events.c.subject.in_(sorted(reader.pool_ids)), events.c.at >= since)
        parts.append(and_(events.c.type.in_(types), whose))
    return or_(*parts) if parts else false()


def _matching(
    reader: aud.Reader, type_: str | None, subject: str | None, since: datetime | None
) -> list[ColumnElement[bool]]:
    where = [_readable(reader)]
    if type_ is not None:
        where.append(events.c.type == type_)
    if subject is not None:
        where.append(events.c.subject == subject)
    if since is not None:
        where.append(events.c.at >= since)
    return where


def _after_in_transactions(after: LogPosition | None) -> list[ColumnElement[bool]]:
    """Events of recorded transactions after `after`, in (tx, id) order; spelled so that the tx index
    bounds the scan (`tx >= t`) rather than the row comparison PostgreSQL cannot use with it."""
    if after is None or after.tx is None:
        return [events.c.tx.is_not(None)]
    return [events.c.tx >= after.tx, or_(events.c.tx > after.tx, events.c.id > after.id)]


def stream(
    conn: Connection,
    reader: aud.Reader,
    after: LogPosition | None,
    limit: int,
    type_: str | None = None,
    subject: str | None = None,
    since: datetime | None = None,
    last: bool = False,
) -> list[StreamedEvent]:
    if last:
        return _newest(conn, after, limit, _matching(reader, type_, subject, since))
    where = _matching(reader, type_, subject, since)
    found: list[Mapping[str, Any]] = []
    if after is None or after.tx is None:
        # SQLite's whole log; on PostgreSQL, the events logged before transactions were recorded.
        legacy: Select[Any] = select(*_COLUMNS).where(events.c.tx.is_(None), *where)
        if after is not None:
            legacy = legacy.where(events.c.id > after.id)
        found = [dict(r._mapping) for r in conn.execute(legacy.order_by(events.c.id).limit(limit))]
    if _postgres(conn) and len(found) < limit:
        settled = (
            select(*_COLUMNS)
            .where(*_after_in_transactions(after), events.c.tx < _SETTLED_BELOW, *where)
            .order_by(events.c.tx, events.c.id)
            .limit(limit - len(found))
        )
        found += [dict(r._mapping) for r in conn.execute(settled)]
    return _streamed(found)


def _newest(
    conn: Connection, after: LogPosition | None, limit: int, where: list[ColumnElement[bool]]
) -> list[StreamedEvent]:
    """The last `limit` events of the stream now (after `after`), still in stream order: the same
    events the forward read would end with, read from the end so that a long log is not walked.

    The stream's end is its settled transactions (PostgreSQL), by (tx, id) backwards; the events
    logged before transactions were recorded (all of SQLite's log) come before them, so they are
    read, by id backwards, only when the settled part holds fewer than `limit`."""
    settled: list[Mapping[str, Any]] = []
    if _postgres(conn):
        newest = (
            select(*_COLUMNS)
            .where(*_after_in_transactions(after), events.c.tx < _SETTLED_BELOW, *where)
            .order_by(events.c.tx.desc(), events.c.id.desc())
            .limit(limit)
        )
        settled = [dict(r._mapping) for r in conn.execute(newest)]
    legacy: list[Mapping[str, Any]] = []
    if len(settled) < limit and (after is None or after.tx is None):
        older: Select[Any] = select(*_COLUMNS).where(events.c.tx.is_(None), *where)
        if after is not None:
            older = older.where(events.c.id > after.id)
        query = older.order_by(events.c.id.desc()).limit(limit - len(settled))
        legacy = [dict(r._mapping) for r in conn.execute(query)]
    return _streamed([*reversed(legacy), *reversed(settled)])


def _last_settled(conn: Connection) -> LogPosition | None:
    """The position of the stream's last event now."""
    if _postgres(conn):
        last = conn.execute(
            select(events.c.tx, events.c.id)
            .where(events.c.tx.is_not(None), events.c.tx < _SETTLED_BELOW)
            .order_by(events.c.tx.desc(), events.c.id.desc())
            .limit(1)
        ).first()
        if last is not None:
            return LogPosition(int(last[0]), int(last[1]))
    newest = conn.execute(select(func.max(events.c.id)).where(events.c.tx.is_(None))).scalar()
    return None if newest is None else LogPosition(None, int(newest))


def _through(last: LogPosition) -> ColumnElement[bool]:
    """Events at or before `last`, in stream order."""
    if last.tx is None:
        return and_(events.c.tx.is_(None), events.c.id <= last.id)
    return or_(
        events.c.tx.is_(None),
        and_(events.c.tx <= last.tx, or_(events.c.tx < last.tx, events.c.id <= last.id)),
    )


def _after(after: LogPosition | None) -> ColumnElement[bool]:
    """Events after `after`, in stream order."""
    if after is None:
        return true()
    if after.tx is None:
        return or_(and_(events.c.tx.is_(None), events.c.id > after.id), events.c.tx.is_not(None))
    return and_(*_after_in_transactions(after))


def count_by_type(conn: Connection, after: LogPosition | None) -> tuple[dict[str, int], LogPosition | None]:
    last = _last_settled(conn)
    if last is None or last == after:
        return {}, after
    # Read in a later snapshot than `last`, which settled before: every event up to it is visible.
    counted = conn.execute(
        select(events.c.type, func.count()).where(_after(after), _through(last)).group_by(events.c.type)
    )
    return {str(type_): int(n) for type_, n in counted}, last
