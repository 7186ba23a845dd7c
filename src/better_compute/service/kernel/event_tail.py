"""Reading the event log to its end without losing an event, and without any timer.

Every ledger and inventory change appends an event in its own transaction, and readers (the booking
index today; metering and reconcilers later) apply the events after the last one they saw. On
PostgreSQL an event's id is handed out when it is inserted, not when it commits: a reader can see
event 12 while event 11 is still to commit (or will never commit, if its transaction rolls back).
Forgetting such a gap after a while would lose a commit that was merely slow; waiting for it for
ever would hold on to every rolled-back id.

So a reader keeps, beside the last id it applied, which transactions could still commit events at or
below that id, as its read's snapshot says: the transactions in progress then (`in_progress`) and
every transaction that had not started (ids from the snapshot's `xmax` on). Each event carries the
id of the transaction that wrote it, so the next read asks for the events of exactly those
transactions below the last id, beside the events after it. Once a later snapshot shows a
transaction ended, its events are all visible to that read; they are applied, and the transaction
is no longer asked about. A rolled-back transaction ends the same way, with nothing to apply.

On SQLite writers commit one at a time, so ids become visible in order: the last id is enough.

`Follower` drives a consumer (the booking index; metering and the reconcilers next) with this: it
loads the consumer when it starts, then feeds it each event once. Its clock (injected, monotonic)
only says how long the oldest transaction asked about has been open, for an operator to see;
nothing is decided by it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from better_compute.domain.kernel.events import LoggedEvent

if TYPE_CHECKING:
    from better_compute.service.kernel.ports import KernelTx

PAGE = 5000
"""Event ids read at most per read (the page runs from the last id seen)."""


@dataclass(frozen=True)
class LogSnapshot:
    """What a read of the log could not see yet (PostgreSQL): transactions in progress, and every
    transaction id from `xmax` on. `xmax` None: a store whose events become visible in id order."""

    xmax: int | None = None
    in_progress: frozenset[int] = field(default_factory=frozenset)

    def newer_than(self, other: LogSnapshot) -> bool:
        """Whether this snapshot was taken after `other` and sees more: snapshots' `xmax` only grows,
        and at the same `xmax` transactions only end."""
        if self.xmax is None or other.xmax is None:
            return True
        if self.xmax != other.xmax:
            return self.xmax > other.xmax
        return self.in_progress < other.in_progress


@dataclass(frozen=True)
class Cursor:
    """What a read asks the log for: events after `last` (one page), and events at or below it
    written by a transaction in `open` or with an id from `from_xid` on."""

    last: int
    open: tuple[int, ...] = ()
    from_xid: int | None = None


class EventTail:
    """Which events of the log a reader has applied. Not thread-safe: its owner holds a lock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.last: int | None = None
        self._clock = clock
        self._open_since: dict[int, float] = {}
        self._open: set[int] = set()
        self._from: int | None = None
        self._done: set[int] = set()
        self._horizon: LogSnapshot | None = None

    @property
    def started(self) -> bool:
        return self.last is not None

    def start(self, last: int, snapshot: LogSnapshot) -> None:
        """Begin after a full load that saw the log up to `last` in `snapshot` (or a later one)."""
        self.last = last
        self._open = set(snapshot.in_progress)
        self._from = snapshot.xmax
        self._done.clear()
        self._horizon = snapshot
        self._note_open()

    def cursor(self) -> Cursor:
        assert self.last is not None
        return Cursor(self.last, tuple(sorted(self._open)), self._from)

    def oldest_open_s(self) -> float | None:
        """How long (by the clock) the oldest transaction still asked about has been: a slow commit
        or a stalled one shows here. None when none is asked about."""
        self._note_open()
        return None if not self._open_since else self._clock() - min(self._open_since.values())

    def _note_open(self) -> None:
        now = self._clock()
        self._open_since = {tx: self._open_since.get(tx, now) for tx in self._open}

    def _unseen(self, tx: int | None) -> bool:
        """Whether events of transaction `tx` may not have been applied yet."""
        if tx is None or tx in self._done:
            return False
        return tx in self._open or (self._from is not None and tx >= self._from)

    def complete(self, read: Cursor, newest: int) -> bool:
        """Whether a read from `read` saw every event its snapshot could: its page reached `newest`,
        the log's last id then."""
        return newest <= read.last + PAGE

    def is_stale(self, snapshot: LogSnapshot) -> bool:
        """Whether a complete read in `snapshot` can add nothing: the reader has applied a complete
        read of a snapshot at least as new."""
        return self._horizon is not None and not snapshot.newer_than(self._horizon)

    def take(
        self, events: Sequence[LoggedEvent], read: Cursor, newest: int, snapshot: LogSnapshot
    ) -> list[LoggedEvent]:
        """The events of a read (made from `read`, in `snapshot`) that were not applied yet, in id
        order; the reader applies them before anything else reads its state.

        A complete read of a newer snapshot may come from a cursor older than the reader's state now
        (another thread applied a read meanwhile): its events are still what that snapshot shows, and
        each is taken at most once. A page that did not reach the end (only `sync` reads those, one
        after another) proves no transaction ended, so it only adds what it saw in progress."""
        assert self.last is not None
        fresh: list[LoggedEvent] = []
        ended: set[int] = set()
        previous: int | None = None
        for event in sorted(events, key=lambda e: e.id):
            event_id, tx = event.id, event.tx
            if event_id == previous:
                continue  # found by two parts of the read (an open transaction from `xmax` on)
            previous = event_id
            if event_id > self.last or self._unseen(tx):
                fresh.append(event)
                if tx is not None:
                    ended.add(tx)
            self.last = max(self.last, event_id)
        # A transaction is done once the whole read is taken, not at its first event: a read shows
        # every event of a transaction that ended, and those below `last` (a slow commit's, written
        # while later ids were seen) are taken by `_unseen`, all of them, not only the first.
        self._done |= ended
        if snapshot.xmax is None:
            return fresh
        if self.complete(read, newest):
            self._open = set(snapshot.in_progress)
            self._from = snapshot.xmax
            self._done.clear()
            self._horizon = snapshot
        else:
            # The whole page is behind the reader now, seen or not: an id in it that this snapshot
            # could not see belongs to a transaction in progress (asked about from now on), one from
            # `xmax` on (asked about already) or one that never commits. Without this a page of
            # ids that are all unseen (a rolled-back bulk write) would be read again for ever.
            self.last = max(self.last, read.last + PAGE)
            self._open |= snapshot.in_progress
        self._note_open()
        return fresh


TxT = TypeVar("TxT", bound="KernelTx")
"""The slice of a transaction a consumer loads its state from (the ledger's, for the booking index)."""

TxT_contra = TypeVar("TxT_contra", bound="KernelTx", contravariant=True)


class Consumer(Protocol[TxT_contra]):
    """What a follower keeps up to date: state rebuilt from the store, then changed event by event."""

    def load(self, tx: TxT_contra) -> None:
        """Rebuild the state from the store itself (the log's position was read just before)."""
        ...

    def apply(self, event: LoggedEvent) -> None:
        """Apply one event; each arrives once, in id order within a read (replays must be no-ops)."""
        ...


class Follower(Generic[TxT]):
    """Keeps a consumer caught up with the event log, under the consumer's own lock (readers of the
    consumer's state take it too, so they never see a half-applied read)."""

    def __init__(
        self, consumer: Consumer[TxT], lock: threading.Lock, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._consumer = consumer
        self._lock = lock
        self.tail = EventTail(clock)

    def _load(self, tx: TxT) -> None:
        # The log's position first, then the state: a change committed in between is in the load
        # and its event is applied again later, which changes nothing.
        last, snapshot = tx.events.tail_start()
        self._consumer.load(tx)
        self.tail.start(last, snapshot)

    def sync(self, tx: TxT) -> None:
        """Catch up: a full load the first time, the tail afterwards, page after page until a read
        reaches the end of the log."""
        with self._lock:
            if not self.tail.started:
                self._load(tx)
                return
            while True:
                read = self.tail.cursor()
                events, newest, snapshot = tx.events.after(read)
                if self.tail.complete(read, newest) and self.tail.is_stale(snapshot):
                    return
                for event in self.tail.take(events, read, newest, snapshot):
                    self._consumer.apply(event)
                if self.tail.complete(read, newest):
                    return

    def prepare(self, tx: TxT) -> Cursor:
        """Load if never loaded; returns what the next read of the log must ask for."""
        with self._lock:
            if not self.tail.started:
                self._load(tx)
            return self.tail.cursor()

    def apply(
        self, tx: TxT, read: Cursor, events: Sequence[LoggedEvent], newest: int, snapshot: LogSnapshot
    ) -> None:
        """Apply a read of the log made from `read` (prepare's cursor) in `snapshot`, when the log's
        last id was `newest`. Afterwards the consumer has applied every event that snapshot shows (a
        read that did not reach the end is left to `sync`, which catches up from the tail's own
        position), so a decision taken on it counts every commit the snapshot saw."""
        with self._lock:
            if not self.tail.started:
                # Another request reset the consumer meanwhile; it reloads from the store.
                self._load(tx)
                return
            complete = self.tail.complete(read, newest)
            if complete and not self.tail.is_stale(snapshot):
                for event in self.tail.take(events, read, newest, snapshot):
                    self._consumer.apply(event)
        if not complete:
            self.sync(tx)

    def reload(self, tx: TxT) -> None:
        """Rebuild from the store itself, under the lock: no reader ever sees the state empty."""
        with self._lock:
            self._load(tx)
