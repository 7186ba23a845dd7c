"""What every context's use cases need of a store: a transaction, and the event log in it.

Each context owns the ports of its own aggregates (`service/<context>/ports.py`) and a Protocol of the
slice of one transaction its use cases use (`LedgerTx`: only the repositories the ledger reads and
writes). `StorePort` is generic over that slice: a use case takes `StorePort[LedgerTx]`, and the
storage's unit of work, which has every repository, satisfies each slice structurally. The whole
transaction (`Tx`, every repository) is composed at the layer's root, in `service/tx.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, TypeVar

from better_compute.domain.kernel.events import Event, LoggedEvent, StreamedEvent
from better_compute.domain.ops.audience import Reader

if TYPE_CHECKING:
    from better_compute.service.kernel.event_tail import Cursor, LogSnapshot

TxT_co = TypeVar("TxT_co", covariant=True)
"""The slice of a transaction a store's units of work offer."""


@dataclass(frozen=True, slots=True)
class LogPosition:
    """Where a reader of the events stream stands: just after the event `id`, written by transaction
    `tx` (None on SQLite, and for events logged before transactions were recorded).

    The stream serves events in this order, not by id alone: on PostgreSQL ids are handed out when
    events are written, not when they commit, so a later id can commit first. The stream serves only
    events of transactions older than every one still in progress, by (transaction, id), so an event
    that commits late always sorts after what was already served (storage/kernel/event_stream.py)."""

    tx: int | None
    id: int


class EventLog(Protocol):
    def append(self, event: Event, at: datetime) -> None:
        """Append the event in the caller's transaction: it is in the log if and only if the change
        it tells of commits."""
        ...

    def append_all(self, items: Sequence[Event], at: datetime) -> None:
        """Append the events, in order, as `append` does each (in one statement: a batch of node
        reports tells of thousands of changes)."""
        ...

    def tail_start(self) -> tuple[int, LogSnapshot]:
        """The event log's last id, and the snapshot it was read in (service.kernel.event_tail)."""
        ...

    def after(self, read: Cursor) -> tuple[list[LoggedEvent], int, LogSnapshot]:
        """A read of the event log from `read`: its events (one page after `read.last`, and those of
        transactions it asks about), the log's last id, and the read's snapshot."""
        ...

    def position(self, event_id: int) -> LogPosition | None:
        """Where the events stream stands just after the event `event_id`; None when no event has it."""
        ...

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
        """Up to `limit` events after `after` (from the start when None), in stream order, of those
        whose transactions ended before any still in progress began: each one `reader` may read
        (domain.ops.audience), of type `type_`, about `subject` and logged at or after `since` when
        given. With `last`, the last `limit` of them (the stream's newest), still in stream order."""
        ...

    def count_by_type(self, after: LogPosition | None) -> tuple[dict[str, int], LogPosition | None]:
        """How many events of each type the stream holds after `after` (from the start when None),
        and the position of the last one counted (`after` when none was)."""
        ...


class StorePort(Protocol[TxT_co]):
    """A store whose transactions offer at least the slice `TxT_co`."""

    @property
    def dialect(self) -> str: ...

    def begin(self, *, single_statement: bool = False) -> AbstractContextManager[TxT_co]:
        """A write transaction; `single_statement` when the work is one ledger write (see the store).
        Here and in `read`, a database that cannot be reached or written raises `Unavailable`."""
        ...

    def read(self) -> AbstractContextManager[TxT_co]: ...

    def check(self, *, write: bool = False) -> None:
        """Raise `Unavailable` unless the database answers now, and takes a write with `write` or
        while it is known not to (for readiness, and for `serve` to say so as it starts)."""
        ...

    def keep_connections(self) -> None:
        """Let the calling thread keep its connections between units of work (a thread that runs
        them one at a time, all day: an event loop's, or an admission worker's)."""
        ...

    def analyze(self) -> None:
        """Refresh the query planner's statistics (after bulk loads)."""
        ...


class KernelTx(Protocol):
    """What the kernel's own use cases read in a transaction: the event log."""

    @property
    def events(self) -> EventLog: ...
