"""The event log: appending events in the writer's transaction, and reading its tail.

A read of the tail is shaped for service.kernel.event_tail: one page of ids after the cursor, the events of
transactions the cursor still asks about, and what the read's snapshot could not see.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, insert, select

from better_compute.domain.kernel.events import Event, LoggedEvent, StreamedEvent, type_of
from better_compute.domain.ledger.events import LedgerBooked
from better_compute.domain.ops.audience import Reader
from better_compute.domain.ops.event_types import parse_event
from better_compute.service.kernel.event_tail import PAGE, Cursor, LogSnapshot
from better_compute.service.kernel.ports import LogPosition
from better_compute.storage.kernel import event_stream, pg_simple
from better_compute.storage.kernel.tables import events

EVENT_PAGE = PAGE
"""The tail is read as an id range rather than `id > last LIMIT n`: PostgreSQL's generic plan for a
prepared statement cannot see that `last` is near the end and would scan the whole events table."""

_PG_TAIL_EVENTS = (
    # The events after `last` (one page of ids), and those at or below it written by a transaction
    # that could still commit then (service.kernel.event_tail): one of `open`, or one from `from` on. Each
    # part is shaped to be looked up by its own index under a generic plan: a bare `tx >= $from`
    # looks to the planner as broad as `id <= $last`, and it would scan every event below `last`
    # (a transaction id 2^31 past `from` cannot occur between two reads), and `id + 0` keeps the
    # id index out of the transactions' parts. An event both parts find is taken once
    # (service.kernel.event_tail).
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


def tail_params(read: Cursor) -> dict[str, Any]:
    return {"last": read.last, "limit": EVENT_PAGE, "open": list(read.open), "from": read.from_xid}


def events_after(conn: Connection, read: Cursor) -> tuple[list[LoggedEvent], int, LogSnapshot]:
    """What a read of the log from `read` finds (see service.kernel.event_tail): the events, the log's last
    id, and the read's snapshot."""
    if conn.dialect.name == "postgresql":
        found, newest, xmax, in_progress = pg_simple.cursor(conn).execute(
            "SELECT " + _PG_TAIL_EVENTS + ", " + _PG_TAIL_STATE, tail_params(read)
        ).fetchone() or ([], 0, None, [])
        return logged(found), int(newest), log_snapshot(xmax, in_progress)
    page = select(events).where(events.c.id > read.last, events.c.id <= read.last + EVENT_PAGE)
    found = [dict(r._mapping) for r in conn.execute(page.order_by(events.c.id))]
    newest = int(conn.execute(select(func.coalesce(func.max(events.c.id), 0))).scalar_one())
    return logged(found), newest, LogSnapshot()


def append(conn: Connection, event: Event, at: datetime) -> None:
    """Write one event, its payload from its definition (domain.kernel.events)."""
    conn.execute(
        insert(events).values(type=type_of(event), subject=event.subject, payload=event.payload(), at=at)
    )


def logged(found: Sequence[Mapping[str, Any]]) -> list[LoggedEvent]:
    """Events as read from the log (dicts with id, type, subject, payload and tx), parsed."""
    return [
        LoggedEvent(
            int(e["id"]),
            None if e.get("tx") is None else int(e["tx"]),
            parse_event(e["type"], e["subject"], e["payload"]),
        )
        for e in found
    ]


def booked_payload_sql(dialect: str, row: str) -> str:
    """The `ledger.booked` payload of booking row `row` as a SQL expression, from the event's one
    definition (`LedgerBooked.COLUMNS`): the PostgreSQL booking statements and SQLite's booking
    trigger write it, and a test checks the installed trigger still says this."""
    build, array = (
        ("json_build_object", "json_build_array")
        if dialect == "postgresql"
        else ("json_object", "json_array")
    )
    parts = []
    for key, column in LedgerBooked.COLUMNS:
        value = f"{row}.{column}"
        parts.append(f"'{key}', {array}({value})" if key == "atoms" else f"'{key}', {value}")
    return f"{build}(" + ", ".join(parts) + ")"


class SqlEvents:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def append(self, event: Event, at: datetime) -> None:
        append(self.conn, event, at)

    def append_all(self, items: Sequence[Event], at: datetime) -> None:
        if items:
            rows = [
                {"type": type_of(e), "subject": e.subject, "payload": e.payload(), "at": at} for e in items
            ]
            self.conn.execute(insert(events), rows)

    def tail_start(self) -> tuple[int, LogSnapshot]:
        return tail_start(self.conn)

    def after(self, read: Cursor) -> tuple[list[LoggedEvent], int, LogSnapshot]:
        return events_after(self.conn, read)

    def position(self, event_id: int) -> LogPosition | None:
        return event_stream.position(self.conn, event_id)

    def stream(
        self,
        reader: Reader,
        after: LogPosition | None,
        limit: int,
        type_: str | None = None,
        subject: str | None = None,
        since: datetime | None = None,
        last: bool = False,
    ) -> list[StreamedEvent]:
        return event_stream.stream(self.conn, reader, after, limit, type_, subject, since, last)

    def count_by_type(self, after: LogPosition | None) -> tuple[dict[str, int], LogPosition | None]:
        return event_stream.count_by_type(self.conn, after)
