"""SQL implementations of the service ports, bound to one open connection (one transaction)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Table, delete, insert, select

from better_compute.domain.ledger import Booking
from better_compute.domain.timewin import Window
from better_compute.service.event_tail import Cursor, LogSnapshot
from better_compute.service.ports import Row
from better_compute.storage import inventory as inv
from better_compute.storage import ledger, reservations
from better_compute.storage.tables import events, metadata, pool_nodes


def table_named(name: str) -> Table:
    return metadata.tables[name]


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
        return ledger.book(
            self.conn, atom_ids, span, allocation_id, tenant_id, now, require_bookable=require_bookable
        )

    def busy_spans(self, atom_ids: Sequence[str], since: datetime) -> list[Window]:
        return ledger.busy_spans(self.conn, atom_ids, since)

    def allocation_bookings(self, allocation_id: str) -> list[Booking]:
        return ledger.allocation_bookings(self.conn, allocation_id)

    def booking_allocation(self, booking_id: str) -> str | None:
        return ledger.booking_allocation(self.conn, booking_id)

    def end_allocation(self, allocation_id: str, now: datetime, event_type: str) -> int:
        return ledger.end_allocation(self.conn, allocation_id, now, event_type)

    def cancel_allocation(self, allocation_id: str, now: datetime) -> int:
        return ledger.cancel_allocation(self.conn, allocation_id, now)

    def family_atom_ids(self, gpu_id: str) -> list[str]:
        return ledger.family_atom_ids(self.conn, gpu_id)


class SqlInventory:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def nodes_by_id(self, node_ids: Sequence[str]) -> dict[str, Row]:
        return inv.nodes_by_id(self.conn, node_ids)

    def gpus_of_nodes(self, node_ids: Sequence[str]) -> list[Row]:
        return inv.gpus_of_nodes(self.conn, node_ids)

    def atoms_of_nodes(self, node_ids: Sequence[str]) -> list[Row]:
        return inv.atoms_of_nodes(self.conn, node_ids)

    def lock_nodes(self, node_ids: Sequence[str]) -> None:
        inv.lock_nodes(self.conn, node_ids)

    def pools_of_nodes(self, node_ids: Sequence[str]) -> dict[str, Row]:
        return inv.pools_of_nodes(self.conn, node_ids)

    def gpu(self, gpu_id: str) -> Row | None:
        return self.get("gpus", gpu_id)

    def upsert(self, table: str, rows: Sequence[Mapping[str, Any]], key: Sequence[str]) -> None:
        inv.upsert(self.conn, table_named(table), rows, key)

    def mark_observed(self, node_id: str, generation: int, at: datetime) -> None:
        inv.mark_observed(self.conn, node_id, generation, at)

    def set_pool_nodes(self, pool_id: str, node_ids: Sequence[str]) -> None:
        self.conn.execute(delete(pool_nodes).where(pool_nodes.c.pool_id == pool_id))
        if node_ids:
            self.conn.execute(insert(pool_nodes), [{"pool_id": pool_id, "node_id": n} for n in node_ids])

    def list(
        self,
        table: str,
        *,
        filters: Mapping[str, Any] | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> list[Row]:
        t = table_named(table)
        where = [t.c[k] == v for k, v in (filters or {}).items()]
        return inv.list_table(self.conn, t, where=where, limit=limit, after=after)

    def get(self, table: str, row_id: str) -> Row | None:
        t = table_named(table)
        key = next(iter(t.primary_key.columns))
        found = inv.rows(self.conn, select(t).where(key == row_id))
        return found[0] if found else None

    def insert_new(self, table: str, rows: Sequence[Mapping[str, Any]]) -> int:
        return inv.insert_new(self.conn, table_named(table), rows)

    def credential_by_hash(self, token_hash: str) -> Row | None:
        return inv.credential_by_hash(self.conn, token_hash)

    def compare_and_set(
        self, table: str, row_id: str, expected: Mapping[str, Any], values: Mapping[str, Any]
    ) -> bool:
        return inv.compare_and_set(self.conn, table_named(table), row_id, expected, values)


class SqlEvents:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def append(self, type_: str, subject: str, payload: Mapping[str, Any], at: datetime) -> None:
        self.conn.execute(insert(events).values(type=type_, subject=subject, payload=dict(payload), at=at))


class SqlReservations:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def lock(self, key: str) -> None:
        reservations.lock(self.conn, key)

    def held_atoms(self, allocation_ids: Sequence[str]) -> dict[str, list[Row]]:
        return reservations.held_atoms(self.conn, allocation_ids)

    def tail_start(self) -> tuple[int, LogSnapshot]:
        return reservations.tail_start(self.conn)

    def snapshot(
        self,
        tenant_id: str,
        pool_id: str,
        key: str | None,
        read: Cursor,
        lock_key: str,
        credential_id: str | None = None,
    ) -> dict[str, Any]:
        return reservations.admission_snapshot(
            self.conn, tenant_id, pool_id, key, read, lock_key, credential_id
        )

    def commit(self, row: Row, atom_ids: Sequence[str], now: datetime) -> None:
        reservations.commit_reservation(self.conn, row, atom_ids, now)

    def events_after(self, read: Cursor) -> tuple[list[Row], int, LogSnapshot]:
        return reservations.events_after(self.conn, read)

    def live_bookings(self, since: datetime) -> list[Row]:
        return reservations.live_bookings(self.conn, since)


class SqlTx:
    """The repositories of one transaction; also exposes the raw connection to storage-side code."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.ledger = SqlLedger(conn)
        self.inventory = SqlInventory(conn)
        self.events = SqlEvents(conn)
        self.reservations = SqlReservations(conn)
