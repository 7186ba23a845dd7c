"""Replay's record of each pool's request sizes: admission's tie-break input
(`placement.recorded_demand.RecordedDemand`), read as the server reads it, at the same moments,
with the same answer, but without counting the whole ledger again at each read.

In virtual time nearly every admission finds the record older than `REFRESH_AFTER` and reads it
again: a scan of every booking of the last 30 days, which is every booking a replay made. A trace
of 7,000 tasks made that read the replay's largest cost, growing with each task. The record is a
count of holdings, and each reservation's or replica's holdings are its own (`usage.held_shapes`
groups by allocation), so the counts of the allocations booked since the last read add to the counts
then. That holds while nothing else changed: no earlier booking was released, cancelled, extended,
rebound or booked again, no atom changed (the booking index's own rule:
`booking_index.BOOKINGS_AND_ATOMS_KEPT`), and no earlier booking's start or end crossed the
record's period since (a reservation that begins later, or one that ends more than 30 days ago).
When any did, or the clock went back, the record is read whole, as the server does.
"""

from __future__ import annotations

import heapq
import threading
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from better_compute.domain.kernel.events import LoggedEvent
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.events import (
    LedgerBooked,
    LedgerExtended,
    LedgerReleased,
    PartitionReleased,
)
from better_compute.domain.ledger.ledger import released
from better_compute.domain.metering.metering import HeldShape
from better_compute.domain.placement.pool_fragmentation import Demand, held_demand
from better_compute.service.kernel.event_tail import Follower
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger.booking_index import BOOKINGS_AND_ATOMS_KEPT
from better_compute.service.ops.ports import OpsTx
from better_compute.service.placement.recorded_demand import DEMAND_WINDOW, RecordedDemand

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INSTANT = timedelta(microseconds=1)
"""The record's period ends just after its read's instant (`RecordedDemand._read`'s)."""

_Key = tuple[str, str, Fraction, int]
"""(pool, atom class, share, atoms): one size of holding, as `HeldShape` counts it."""


class _Booked:
    """The scratch store's bookings by allocation, kept up with its event log (a `Follower`'s
    consumer): those booked since the last read, and whether anything else happened since."""

    def __init__(self) -> None:
        self.spans: dict[str, list[tuple[datetime, datetime | None]]] = defaultdict(list)
        self.fresh: set[str] = set()
        self.changed = True

    def load(self, tx: OpsTx) -> None:
        self.spans.clear()
        self.fresh.clear()
        for b in tx.ledger.live_bookings(_EPOCH):
            self.spans[b.allocation_id].append((b.starts_at, b.ends_at))
        self.changed = True

    def apply(self, logged: LoggedEvent) -> None:
        event = logged.event
        if isinstance(event, LedgerBooked):
            if event.subject in self.spans and event.subject not in self.fresh:
                self.changed = True  # more of an allocation already counted
            self.fresh.add(event.subject)
            self.spans[event.subject].extend((event.start, event.end) for _ in event.atoms)
        elif not isinstance(event, BOOKINGS_AND_ATOMS_KEPT):
            self.changed = True  # the next read is whole
            # Spans are only added (a cut or moved end beside the old one): one that no longer
            # holds at worst makes a later read whole again.
            spans = self.spans.get(event.subject, [])
            if isinstance(event, LedgerReleased | PartitionReleased):
                cut = [released(Window(start, end), event.at) for start, end in spans]
                spans.extend((w.start, w.end) for w in cut if w is not None)
            elif isinstance(event, LedgerExtended):
                spans.extend([(start, event.end) for start, _ in spans])


class ReplayedDemand(RecordedDemand):
    """`RecordedDemand` over a replay's scratch store: the same reads at the same moments (its
    refresh rules are the server's), each adding the holdings of the allocations booked since the
    last instead of counting them all, when that gives the same counts (the module docstring)."""

    def __init__(self, store: StorePort[OpsTx]) -> None:
        super().__init__(store)
        self._scratch = store
        self._booked = _Booked()
        self._follower: Follower[OpsTx] = Follower(self._booked, threading.Lock())
        self._counts: dict[_Key, int] = {}
        self._since: datetime | None = None
        """The start of the period of the last read."""
        self._starts: list[datetime] = []
        """Starts of counted allocations' bookings not yet in the period (heap)."""
        self._ends: list[datetime] = []
        """Ends of counted allocations' bookings still in the period (heap)."""
        self._read_lock = threading.Lock()
        self.whole_reads = 0
        """Reads that counted every booking again (the rest added the new allocations' holdings)."""

    def _read(self, pool_id: str, now: datetime) -> Demand | None:
        since, until = now - DEMAND_WINDOW, now + _INSTANT
        period = Window(since, until)
        with self._read_lock, self._scratch.read() as tx:
            self._follower.sync(tx)
            booked = self._booked
            if self._whole_needed(since, until):
                self._counts = {}
                self.whole_reads += 1
                self._add(tx.usage.held_shapes(period, now))
                self._starts, self._ends = [], []
                self._file(list(booked.spans), since, until)
            elif booked.fresh:
                fresh = sorted(booked.fresh)
                self._add(tx.usage.held_shapes(period, now, fresh))
                self._file(fresh, since, until)
            booked.fresh.clear()
            booked.changed = False
            self._since = since
            held = [HeldShape(p, c, s, n, t) for (p, c, s, n), t in sorted(self._counts.items())]
        self.reads += 1
        return held_demand(h for h in held if h.pool_id == pool_id).get(pool_id)

    def _whole_needed(self, since: datetime, until: datetime) -> bool:
        """Whether the counts must be read whole: something besides new bookings changed, the clock
        went back, or a counted booking's start or end crossed the period since the last read."""
        last = self._since
        if self._booked.changed or last is None or since < last:
            return True
        crossed = False
        while self._starts and self._starts[0] < until:
            heapq.heappop(self._starts)
            crossed = True
        while self._ends and self._ends[0] <= since:
            heapq.heappop(self._ends)
            crossed = True
        return crossed

    def _add(self, held: list[HeldShape]) -> None:
        for h in held:
            key = (h.pool_id, h.cls, h.share, h.atoms)
            self._counts[key] = self._counts.get(key, 0) + h.times

    def _file(self, allocations: list[str], since: datetime, until: datetime) -> None:
        """Keep the starts still to come and the ends still in the period of these allocations'
        bookings: when one crosses the period, the next read is whole."""
        for allocation in allocations:
            for start, end in self._booked.spans.get(allocation, ()):
                if start >= until:
                    heapq.heappush(self._starts, start)
                if end is not None and end > since:
                    heapq.heappush(self._ends, end)


__all__ = ["ReplayedDemand"]
