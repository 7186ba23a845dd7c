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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from better_compute.domain.events import LoggedEvent

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

    def __init__(self) -> None:
        self.last: int | None = None
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

    def reset(self) -> None:
        self.last = None
        self._open.clear()
        self._from = None
        self._done.clear()
        self._horizon = None

    def cursor(self) -> Cursor:
        assert self.last is not None
        return Cursor(self.last, tuple(sorted(self._open)), self._from)

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
        for event in sorted(events, key=lambda e: e.id):
            event_id, tx = event.id, event.tx
            if event_id > self.last or self._unseen(tx):
                fresh.append(event)
                if tx is not None:
                    self._done.add(tx)
            self.last = max(self.last, event_id)
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
        return fresh
