"""An in-memory cache of the ledger and of each pool's atoms, kept current by tailing the event log.

Choosing atoms needs to know, for a window, which atoms are booked and which GPUs are partly used;
asking the database that for every reservation over tens of thousands of atoms is the slow part of
admission. Every ledger change appends an event in its own transaction, so a replica catches up by
reading the events after the last one it saw. The cache may lag behind another replica's commit: the
database's exclusion constraint is still the fence, and a refused write makes the caller resync.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from better_compute.domain import choose
from better_compute.domain.admission import DeviceRequest
from better_compute.domain.atoms import Atom
from better_compute.domain.selectors import Selector
from better_compute.domain.timewin import Window
from better_compute.service.event_tail import Cursor, EventTail, LogSnapshot
from better_compute.service.ports import Row, Tx

Owner = tuple[str | None, str | None, str | None]
# Bookings are filed under every bucket they touch, so that finding those that overlap a window looks
# at little more than the bookings that do. Short bookings are filed by the hour (with day buckets, an
# hour's request looked at a whole day's bookings: 24 times as many on a fleet booked by the hour);
# longer ones by the day, so that a week's booking is filed 7 times, not 168; bookings longer than a
# month (and open-ended ones) are kept in one set that every look-up checks.
_HOUR = timedelta(hours=1)
_DAY = timedelta(days=1)
_BY_HOUR_MAX = 48
_BY_DAY_MAX = 31
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_TICK = timedelta(microseconds=1)
_LEDGER_EVENTS = {"ledger.booked", "ledger.released", "ledger.cancelled", "gpu.partition.released"}
_QUIET_EVENTS = {
    "reservation.created",
    "reservation.cancelled",
    "reservation.released",
    "gpu.partition.booked",
}


def _span(start: datetime, end: datetime, size: timedelta) -> range:
    """The buckets of `size` that the half-open window [start, end) touches."""
    return range((start - _EPOCH) // size, (end - _TICK - _EPOCH) // size + 1)


def _parse_time(value: Any) -> datetime | None:
    """Event payload times: ISO 8601 from PostgreSQL and Python, naive UTC text from SQLite triggers."""
    if value is None:
        return None
    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


MATCHING_CACHE = 256
"""Request shapes (class and selector) whose matching atoms a pool keeps, least recently used first
out: a handful of shapes serve nearly every request, and a stream of distinct selectors (refused
requests included) must not grow a process's memory without bound."""


@dataclass
class PoolAtoms:
    """A pool's present atoms, and per request shape the matching ones grouped by GPU."""

    atoms: dict[str, Atom]
    _matching: OrderedDict[tuple[str, Selector], dict[str, list[Atom]]] = field(default_factory=OrderedDict)

    def matching_by_gpu(self, request: DeviceRequest) -> dict[str, list[Atom]]:
        key = (request.cls, request.selector)
        found = self._matching.get(key)
        if found is not None:
            self._matching.move_to_end(key)
            return found
        grouped: dict[str, list[Atom]] = {}
        for atom in choose.matching(request, self.atoms.values()):
            grouped.setdefault(atom.gpu_id, []).append(atom)
        found = dict(sorted(grouped.items()))
        self._matching[key] = found
        while len(self._matching) > MATCHING_CACHE:
            self._matching.popitem(last=False)
        return found


@dataclass
class _Interval:
    allocation_id: str
    atom_id: str
    start: datetime
    end: datetime | None
    owner: Owner = (None, None, None)
    """(tenant, pool, atom class) of the booking, for counting what a tenant holds."""

    def overlaps(self, start: datetime, end: datetime | None) -> bool:
        return (self.end is None or start < self.end) and (end is None or self.start < end)


class BookingIndex:
    """Live bookings by allocation, by atom and by hour or day, and pool atoms; thread-safe, shared by
    the API's workers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Which events have been applied, and which transactions may still commit older ones.
        self._tail = EventTail()
        self._by_allocation: dict[str, list[_Interval]] = {}
        self._by_atom: dict[str, set[str]] = defaultdict(set)  # atom -> allocations booking it
        self._by_hour: dict[int, set[str]] = defaultdict(set)
        self._by_day: dict[int, set[str]] = defaultdict(set)
        self._long: set[str] = set()
        self._pools: dict[str, PoolAtoms] = {}
        self._pools_generation = 0
        """Bumped whenever pool atoms are dropped: a load that raced with a drop is not kept."""
        self._claimed: Counter[str] = Counter()

    # -- keeping up ------------------------------------------------------------------------------
    def sync(self, tx: Tx) -> None:
        """Catch up with the ledger: a full load the first time, the event tail afterwards, page after
        page until a read reaches the end of the log."""
        with self._lock:
            if not self._tail.started:
                self._load(tx)
                return
            while True:
                read = self._tail.cursor()
                events, newest, snapshot = tx.events.after(read)
                if self._tail.complete(read, newest) and self._tail.is_stale(snapshot):
                    return
                for event in self._tail.take(events, read, newest, snapshot):
                    self._apply(event)
                if self._tail.complete(read, newest):
                    return

    def prepare(self, tx: Tx) -> Cursor:
        """Load the index if it never was; returns what the next read of the log must ask for."""
        with self._lock:
            if not self._tail.started:
                self._load(tx)
            return self._tail.cursor()

    def apply(self, tx: Tx, read: Cursor, events: Sequence[Row], newest: int, snapshot: LogSnapshot) -> None:
        """Apply a read of the log made from `read` (prepare's cursor) in `snapshot`, when the log's
        last id was `newest`. Afterwards the index has applied every event that snapshot shows (a
        read that did not reach the end is left to `sync`, which catches up from the index's own
        position), so a decision taken on it counts every commit the snapshot saw."""
        with self._lock:
            if not self._tail.started:
                # Another request reset the index meanwhile; it reloads from the ledger.
                self._load(tx)
                return
            complete = self._tail.complete(read, newest)
            if complete and not self._tail.is_stale(snapshot):
                for event in self._tail.take(events, read, newest, snapshot):
                    self._apply(event)
        if not complete:
            self.sync(tx)

    def reload(self, tx: Tx) -> None:
        """Rebuild the index from the ledger itself, under the lock: no reader ever sees it empty
        (a decision on an emptied index would count nothing the tenant holds)."""
        with self._lock:
            self._load(tx)

    def _load(self, tx: Tx) -> None:
        # The log's position first, then the bookings: a booking committed in between is in the load
        # and its event is applied again later, which changes nothing.
        last, snapshot = tx.events.tail_start()
        self._by_allocation.clear()
        self._by_atom.clear()
        self._by_hour.clear()
        self._by_day.clear()
        self._long.clear()
        self._forget_pools()
        for b in tx.ledger.live_bookings(_EPOCH):
            self._add(b.allocation_id, [b.atom_id], b.starts_at, b.ends_at, (b.tenant_id, b.pool_id, b.cls))
        self._tail.start(last, snapshot)

    def _apply(self, event: Row) -> None:
        kind, subject, payload = event["type"], event["subject"], event["payload"] or {}
        if kind == "ledger.booked":
            # One event per booking (an allocation's atoms may arrive in several); replays are no-ops.
            held = {i.atom_id for i in self._by_allocation.get(subject, ())}
            fresh = [a for a in payload.get("atoms", []) if a not in held]
            if fresh:
                self._add(
                    subject,
                    fresh,
                    _parse_time(payload["start"]),
                    _parse_time(payload.get("end")),
                    (payload.get("tenantId"), payload.get("poolId"), payload.get("class")),
                )
        elif kind in ("ledger.released", "gpu.partition.released"):
            at = _parse_time(payload["at"])
            assert at is not None
            self._end(subject, at)
        elif kind == "ledger.cancelled":
            self._drop(subject)
        elif kind not in _QUIET_EVENTS:
            self._forget_pools()  # inventory or pool changes: atoms are re-read on next use

    def _buckets_of(self, start: datetime, end: datetime | None) -> tuple[dict[int, set[str]], range] | None:
        """Where a booking is filed: hour or day buckets, or None for the set of long ones."""
        if end is None:
            return None
        hours = _span(start, end, _HOUR)
        if len(hours) <= _BY_HOUR_MAX:
            return self._by_hour, hours
        days = _span(start, end, _DAY)
        return (self._by_day, days) if len(days) <= _BY_DAY_MAX else None

    def _add(
        self,
        allocation_id: str,
        atom_ids: Iterable[str],
        start: datetime | None,
        end: datetime | None,
        owner: Owner = (None, None, None),
    ) -> None:
        assert start is not None
        intervals = self._by_allocation.setdefault(allocation_id, [])
        for atom_id in atom_ids:
            intervals.append(_Interval(allocation_id, atom_id, start, end, owner))
            self._by_atom[atom_id].add(allocation_id)
        filed = self._buckets_of(start, end)
        if filed is None:
            self._long.add(allocation_id)
        else:
            index, buckets = filed
            for b in buckets:
                index[b].add(allocation_id)

    def _drop(self, allocation_id: str) -> None:
        intervals = self._by_allocation.pop(allocation_id, [])
        self._long.discard(allocation_id)
        for atom_id in {i.atom_id for i in intervals}:
            holders = self._by_atom.get(atom_id)
            if holders is not None:
                holders.discard(allocation_id)
                if not holders:
                    del self._by_atom[atom_id]
        for start, end in {(i.start, i.end) for i in intervals}:
            filed = self._buckets_of(start, end)
            if filed is None:
                continue
            index, buckets = filed
            for b in buckets:
                members = index.get(b)
                if members is not None:
                    members.discard(allocation_id)
                    if not members:
                        del index[b]

    def _end(self, allocation_id: str, at: datetime) -> None:
        """Mirror of the ledger's release: started bookings end at `at`, future ones are cancelled."""
        intervals = self._by_allocation.get(allocation_id)
        if not intervals:
            return
        kept = [i for i in intervals if i.start < at]
        self._drop(allocation_id)
        for interval in kept:
            end = at if interval.end is None or interval.end > at else interval.end
            self._add(allocation_id, [interval.atom_id], interval.start, end, interval.owner)

    # -- reading ---------------------------------------------------------------------------------
    def busy(self, window: Window) -> list[_Interval]:
        """Every live booking that overlaps the window."""
        with self._lock:
            if window.end is None:
                candidates: set[str] = set(self._by_allocation)
            else:
                candidates = set(self._long)
                for index, size in ((self._by_hour, _HOUR), (self._by_day, _DAY)):
                    buckets = _span(window.start, window.end, size)
                    if len(buckets) > len(index):  # a long window: walk the buckets there are
                        for b in [b for b in index if b in buckets]:
                            candidates |= index[b]
                    else:
                        for b in buckets:
                            members = index.get(b)
                            if members:
                                candidates |= members
            return [
                i
                for alloc in candidates
                for i in self._by_allocation.get(alloc, ())
                if i.overlaps(window.start, window.end)
            ]

    @staticmethod
    def held(tenant_id: str, pool_id: str, busy: Sequence[_Interval]) -> dict[str, int]:
        """What the tenant holds in the pool during a window, per atom class, from `busy(window)`.

        Exact when the caller holds the tenant's quota lock and has just caught up with the event log:
        every booking of this tenant in this pool was committed before the lock was taken.
        """
        counts: Counter[str] = Counter(
            i.owner[2] or "" for i in busy if i.owner[0] == tenant_id and i.owner[1] == pool_id
        )
        return dict(counts)

    def claimed(self) -> set[str]:
        """Atoms chosen by requests of this process that have not committed or rolled back yet."""
        with self._lock:
            return set(self._claimed)

    def claim(self, atom_ids: Iterable[str]) -> None:
        """Keep concurrent requests in this process off atoms one of them is about to book."""
        with self._lock:
            self._claimed.update(atom_ids)

    def unclaim(self, atom_ids: Iterable[str]) -> None:
        with self._lock:
            self._claimed.subtract(atom_ids)
            for atom in [a for a, n in self._claimed.items() if n <= 0]:
                del self._claimed[atom]

    def windows_of(self, atom_ids: Sequence[str]) -> dict[str, list[_Interval]]:
        """Every live booking of these atoms (each with its `start` and `end`), for the earliest start
        after a refusal; looked up by atom, so it costs what those atoms hold, not the whole index."""
        out: dict[str, list[_Interval]] = {}
        with self._lock:
            for atom_id in atom_ids:
                out[atom_id] = [
                    i
                    for allocation in self._by_atom.get(atom_id, ())
                    for i in self._by_allocation[allocation]
                    if i.atom_id == atom_id
                ]
        return out

    def _forget_pools(self, pool_id: str | None = None) -> None:
        """Drop every pool's atoms, or one pool's (the caller holds the lock)."""
        if pool_id is None:
            self._pools.clear()
        else:
            self._pools.pop(pool_id, None)
        self._pools_generation += 1

    def forget_pool(self, pool_id: str) -> None:
        """Drop the pool's atoms: they are read again on next use (after a commit found one gone)."""
        with self._lock:
            self._forget_pools(pool_id)

    def pool_atoms(self, tx: Tx, pool_id: str) -> PoolAtoms:
        with self._lock:
            cached = self._pools.get(pool_id)
            generation = self._pools_generation
        if cached is not None:
            return cached
        loaded = PoolAtoms({a.id: a for a in tx.atoms.of_pool(pool_id)})
        with self._lock:
            # Kept only if nothing was dropped meanwhile: an inventory change applied while these
            # rows were read may be newer than them (they are used for this request all the same).
            if self._pools_generation == generation:
                self._pools[pool_id] = loaded
        return loaded
