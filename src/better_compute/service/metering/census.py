"""What /metrics reads at scrape time: atoms by pool, class and state, billable hours by meter, and
the event log's events by type.

Each figure is read from the store (and the booking index, a cache of the ledger kept current from
the event log) when it is asked for, so every server process answers the same numbers and none has
to be told of a change. The events are counted once each: a process counts the whole log on its
first scrape, then only what the stream settled since (`EventTally`).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.census import CensusKey, atom_census
from better_compute.domain.metering.metering import hours_by_meter
from better_compute.service.kernel.ports import LogPosition, StorePort
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.metering.ports import MeteringTx

_INSTANT = timedelta(microseconds=1)


@dataclass(frozen=True)
class Census:
    """What one scrape read, in one read of the store."""

    atoms: Mapping[CensusKey, int]
    """Present atoms of every pool, by (pool, class, state) (domain.metering.census)."""
    billable_hours: Mapping[str, float]
    """GPU-hours tenants' bookings have held up to now, by meter (every pool's meter, zero included)."""
    events: Mapping[str, int]
    """Events in the log, by type."""


class EventTally:
    """The log's events by type, counted incrementally: thread-safe, one per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._position: LogPosition | None = None

    def read(self, tx: MeteringTx) -> dict[str, int]:
        with self._lock:
            counts, self._position = tx.events.count_by_type(self._position)
            self._counts.update(counts)
            return dict(self._counts)


def _atoms(tx: MeteringTx, index: BookingIndex, now: datetime) -> Counter[CensusKey]:
    index.sync(tx)
    holders = {i.atom_id: i.allocation_id for i in index.busy(Window(now, now + _INSTANT))}
    census: Counter[CensusKey] = Counter()
    for pool in tx.pools.all():
        census.update(atom_census(index.pool_atoms(tx, pool.id).atoms.values(), holders))
    return census


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def billable_hours(tx: MeteringTx, now: datetime) -> dict[str, float]:
    """GPU-hours billed up to `now` by meter, by the bills' own rule and sums (`tx.usage.totals`,
    `metering.hours_by_meter`): the counter always agrees with the bills."""
    meter_of = {p.id: p.meter for p in tx.pools.all()}
    hours = dict.fromkeys(sorted(set(meter_of.values())), 0.0)
    totals = tx.usage.totals(Window(_EPOCH, now), now, None, None)
    for meter, held in hours_by_meter(totals, meter_of).items():
        hours[meter] = float(held)
    return hours


def take(store: StorePort[MeteringTx], index: BookingIndex, tally: EventTally, now: datetime) -> Census:
    with store.read() as tx:
        return Census(
            atoms=_atoms(tx, index, now), billable_hours=billable_hours(tx, now), events=tally.read(tx)
        )
