"""An in-memory cache of the ledger and of each pool's atoms, kept current by tailing the event log.

Choosing atoms needs to know, for a window, which atoms are booked and which GPUs are partly used;
asking the database that for every reservation over tens of thousands of atoms is the slow part of
admission. Every ledger change appends an event in its own transaction, so a replica catches up by
reading the events after the last one it saw. The cache may lag behind another replica's commit: the
database's exclusion constraint is still the fence, and a refused write makes the caller resync.
"""

from __future__ import annotations

import threading
import time
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
from better_compute.service.ports import Row, Tx

GAP_PATIENCE = 30.0
"""Seconds an event id skipped over is waited for before it is taken as rolled back."""
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


def atom_from_row(row: Row) -> Atom:
    return Atom(
        id=row["id"],
        gpu_id=row["gpu_id"],
        node=row["node_id"],
        cls=row["class"],
        key=row["key"],
        bookable=row["bookable"],
        partition_pending=row["partition_pending"],
        pool_id=row["pool_id"],
        numa_node=row["numa_node"],
        nvlink_domain=row["nvlink_domain"],
        attributes=row["attributes"],
    )


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
        self._last_event: int | None = None
        # PostgreSQL hands out event ids at insert, not at commit: a lower id can become visible
        # after a higher one. Ids skipped over are kept as gaps and asked for again until they show
        # up or GAP_PATIENCE passes (a rolled-back transaction leaves a gap for ever).
        self._gaps: dict[int, float] = {}
        self._by_allocation: dict[str, list[_Interval]] = {}
        self._by_atom: dict[str, set[str]] = defaultdict(set)  # atom -> allocations booking it
        self._by_hour: dict[int, set[str]] = defaultdict(set)
        self._by_day: dict[int, set[str]] = defaultdict(set)
        self._long: set[str] = set()
        self._pools: dict[str, PoolAtoms] = {}
        self._claimed: Counter[str] = Counter()

    # -- keeping up ------------------------------------------------------------------------------
    def sync(self, tx: Tx) -> None:
        """Catch up with the ledger: a full load the first time, the event tail afterwards."""
        with self._lock:
            if self._last_event is None:
                self._load(tx)
                return
            while True:
                batch = tx.reservations.events_after(self._last_event, 5000, self._pending_gaps())
                before = self._last_event
                self._apply_batch(batch)
                if len(batch) < 5000 or self._last_event == before:
                    return

    def prepare(self, tx: Tx) -> tuple[int, list[int]]:
        """Load the index if it never was; returns the last event id seen and the gaps still open."""
        with self._lock:
            if self._last_event is None:
                self._load(tx)
            assert self._last_event is not None
            return self._last_event, self._pending_gaps()

    def apply(self, tx: Tx, events: Sequence[Row], newest: int | None = None) -> None:
        """Apply events read after `prepare`'s id or in its gaps; if `newest` (the log's last id when
        they were read) is further on, catch up with the rest before anyone decides on the index."""
        with self._lock:
            if self._last_event is None:
                # Another request reset the index meanwhile; it reloads from the ledger.
                self._load(tx)
                return
            self._apply_batch(events)
            behind = newest is not None and self._last_event < newest
        if behind or len(events) >= 5000:
            self.sync(tx)

    def _pending_gaps(self) -> list[int]:
        now = time.monotonic()
        for gap in [g for g, since in self._gaps.items() if now - since > GAP_PATIENCE]:
            del self._gaps[gap]
        return sorted(self._gaps)

    def _apply_batch(self, events: Sequence[Row]) -> None:
        assert self._last_event is not None
        now = time.monotonic()
        for event in sorted(events, key=lambda e: int(e["id"])):
            event_id = int(event["id"])
            if event_id in self._gaps:
                del self._gaps[event_id]
            elif event_id <= self._last_event:
                continue
            else:
                for missing in range(self._last_event + 1, event_id):
                    self._gaps[missing] = now
                self._last_event = event_id
            self._apply(event)

    def reset(self) -> None:
        with self._lock:
            self._last_event = None
            self._gaps.clear()
            self._by_allocation.clear()
            self._by_atom.clear()
            self._by_hour.clear()
            self._by_day.clear()
            self._long.clear()
            self._pools.clear()

    def _load(self, tx: Tx) -> None:
        last = tx.reservations.last_event_id()
        self._by_allocation.clear()
        self._by_atom.clear()
        self._by_hour.clear()
        self._by_day.clear()
        self._long.clear()
        self._pools.clear()
        for row in tx.reservations.live_bookings(_EPOCH):
            owner = (row["tenant_id"], row["pool_id"], row["class"])
            self._add(row["allocation_id"], [row["atom_id"]], row["starts_at"], row["ends_at"], owner)
        self._last_event = last

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
            self._pools.clear()  # inventory or pool changes: atoms are re-read on next use

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

    def forget_pool(self, pool_id: str) -> None:
        """Drop the pool's atoms: they are read again on next use (after a commit found one gone)."""
        with self._lock:
            self._pools.pop(pool_id, None)

    def pool_atoms(self, tx: Tx, pool_id: str) -> PoolAtoms:
        with self._lock:
            cached = self._pools.get(pool_id)
        if cached is not None:
            return cached
        rows = tx.inventory.list("atoms", filters={"pool_id": pool_id, "present": True})
        loaded = PoolAtoms({r["id"]: atom_from_row(r) for r in rows})
        with self._lock:
            self._pools[pool_id] = loaded
        return loaded
