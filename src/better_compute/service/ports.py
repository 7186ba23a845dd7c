"""What the use cases need from storage, as Protocols. `storage.uow` implements them on SQL."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from better_compute.domain.ledger import Booking
from better_compute.domain.timewin import Window

if TYPE_CHECKING:
    from better_compute.service.event_tail import Cursor, LogSnapshot

Row = dict[str, Any]


class Overlap(Exception):
    """A live booking already holds one of the atoms in the window (None: the store could not say which)."""

    def __init__(self, atom_id: str | None) -> None:
        super().__init__(atom_id)
        self.atom_id = atom_id


class NotBookable(Exception):
    """Some atoms do not exist or may not be booked (parent, unhealthy, missing, partition pending)."""

    def __init__(self, atom_ids: Sequence[str]) -> None:
        super().__init__(list(atom_ids))
        self.atom_ids = list(atom_ids)


class KeyTaken(Exception):
    """A concurrent request committed a reservation with the same idempotency key first."""


class LedgerPort(Protocol):
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
        """Book all the atoms or none. On PostgreSQL this is one statement, atomic by itself."""
        ...

    def busy_spans(self, atom_ids: Sequence[str], since: datetime) -> list[Window]: ...

    def allocation_bookings(self, allocation_id: str) -> list[Booking]: ...

    def booking_allocation(self, booking_id: str) -> str | None: ...

    def end_allocation(self, allocation_id: str, now: datetime, event_type: str) -> int: ...

    def cancel_allocation(self, allocation_id: str, now: datetime) -> int: ...

    def family_atom_ids(self, gpu_id: str) -> list[str]: ...


class InventoryPort(Protocol):
    def nodes_by_id(self, node_ids: Sequence[str]) -> dict[str, Row]: ...

    def gpus_of_nodes(self, node_ids: Sequence[str]) -> list[Row]: ...

    def atoms_of_nodes(self, node_ids: Sequence[str]) -> list[Row]: ...

    def lock_nodes(self, node_ids: Sequence[str]) -> None:
        """Hold the nodes until the transaction ends: whoever derives their atoms (a report, a pool
        change) reads their pool membership only once no other such writer is under way."""
        ...

    def pools_of_nodes(self, node_ids: Sequence[str]) -> dict[str, Row]: ...

    def gpu(self, gpu_id: str) -> Row | None: ...

    def upsert(self, table: str, rows: Sequence[Mapping[str, Any]], key: Sequence[str]) -> None: ...

    def mark_observed(self, node_id: str, generation: int, at: datetime) -> None: ...

    def set_pool_nodes(self, pool_id: str, node_ids: Sequence[str]) -> None: ...

    def list(
        self,
        table: str,
        *,
        filters: Mapping[str, Any] | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> list[Row]: ...

    def get(self, table: str, row_id: str) -> Row | None: ...

    def credential_by_hash(self, token_hash: str) -> Row | None:
        """The credential row (id, tenant_id, is_admin, revoked_at) with this token hash; on every request."""
        ...

    def insert_new(self, table: str, rows: Sequence[Mapping[str, Any]]) -> int:
        """Insert rows, skipping any that collide with a primary or unique key; returns how many went in."""
        ...

    def compare_and_set(
        self, table: str, row_id: str, expected: Mapping[str, Any], values: Mapping[str, Any]
    ) -> bool:
        """Update the row only if its columns still equal `expected` (e.g. a generation); True if it did."""
        ...


class ReservationsPort(Protocol):
    """What reservations need beyond generic rows: locks, the event tail, live bookings, joins."""

    def lock(self, key: str) -> None:
        """Serialise writers on `key` until the transaction ends (SQLite serialises every writer)."""
        ...

    def held_atoms(self, allocation_ids: Sequence[str]) -> dict[str, list[Row]]:
        """Per allocation, the atoms its bookings hold (atom rows), cancelled bookings excepted."""
        ...

    def tail_start(self) -> tuple[int, LogSnapshot]:
        """The event log's last id, and the snapshot it was read in (service.event_tail)."""
        ...

    def snapshot(
        self,
        tenant_id: str,
        pool_id: str,
        key: str | None,
        read: Cursor,
        lock_key: str,
        credential_id: str | None = None,
    ) -> dict[str, Any]:
        """What admission reads, at once: `replay_id`, `pool` ({mode, owner}), `tenant_exists`,
        `policies`, `limits` per class, `credential_live` (whether `credential_id` names a credential
        that is not revoked; None without one), and a read of the event log from `read`: `events`,
        `newest_event` (the log's last id) and `log` (the read's LogSnapshot). The `lock` `lock_key`
        is taken first."""
        ...

    def commit(self, row: Row, atom_ids: Sequence[str], now: datetime) -> None:
        """Write the reservation row, its allocation, bookings and events, and commit: the last step
        of a transaction (raises Overlap, NotBookable, or KeyTaken when the idempotency key was
        taken concurrently; nothing is written then)."""
        ...

    def events_after(self, read: Cursor) -> tuple[list[Row], int, LogSnapshot]:
        """A read of the event log from `read`: its events (one page after `read.last`, and those of
        transactions it asks about), the log's last id, and the read's snapshot."""
        ...

    def live_bookings(self, since: datetime) -> list[Row]:
        """Live bookings that end after `since` (or never): allocation_id, atom_id, starts_at, ends_at."""
        ...


class EventsPort(Protocol):
    def append(self, type_: str, subject: str, payload: Mapping[str, Any], at: datetime) -> None: ...


class Tx(Protocol):
    """One open transaction and the repositories bound to it."""

    @property
    def ledger(self) -> LedgerPort: ...

    @property
    def inventory(self) -> InventoryPort: ...

    @property
    def events(self) -> EventsPort: ...

    @property
    def reservations(self) -> ReservationsPort: ...


class StorePort(Protocol):
    @property
    def dialect(self) -> str: ...

    def begin(self, *, single_statement: bool = False) -> AbstractContextManager[Tx]:
        """A write transaction; `single_statement` when the work is one ledger write (see the store)."""
        ...

    def read(self) -> AbstractContextManager[Tx]: ...

    def keep_connections(self) -> None:
        """Let the calling thread keep its connections between units of work (a thread that runs
        them one at a time, all day: an event loop's, or an admission worker's)."""
        ...

    def analyze(self) -> None:
        """Refresh the query planner's statistics (after bulk loads)."""
        ...
