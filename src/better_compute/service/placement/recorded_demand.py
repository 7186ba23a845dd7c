"""Each pool's recorded request sizes, kept for admission's fragmentation-aware choice.

The choice (`domain.ledger.choose`, rule 2) breaks ties between equally good GPUs by the gradient of
the pool's fragmentation (Weng et al., ATC '23) against the sizes its reservations and replicas held
in the last `DEMAND_WINDOW` (the sizes its atoms come in, for a pool with none), the same measure and
the same record as `/metrics`' `better_compute_pool_fragmentation_ratio`. Reading that record is a scan
of 30 days of bookings, far too much for every admission, so it is kept here per pool and read again
when it is `REFRESH_AFTER` old (by the admission's clock), after `REFRESH_ADMISSIONS` admissions in
the pool, or when the pool's atoms change (the booking index replaces its snapshot: a pool edit, a
reshape, nodes joining or leaving, a cordon), whichever comes first.

The staleness is correctness-neutral: the gradient only orders GPUs the choice rules already find
equal (as busy, leaving as many free atoms), never makes a choice the rules forbid, and never turns a
grant into a refusal or back. A lagging record only means a tie may go where last minute's demand
would have sent it. Each server process keeps its own (as it keeps its booking index), so replicas
of the server may break one tie differently for at most that while; the ledger's commit is the fence.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Container
from dataclasses import dataclass
from datetime import datetime, timedelta

from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.choose import FragmentationGrowth
from better_compute.domain.placement.pool_fragmentation import (
    Demand,
    PoolShape,
    growth_of,
    held_demand,
    pool_shape,
)
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger.booking_index import PoolAtoms
from better_compute.service.metering.ports import MeteringTx

DEMAND_WINDOW = timedelta(days=30)
"""How far back a pool's recorded request sizes are read: what its reservations and replicas held in
the last 30 days (docs/metrics.md#fragmentation)."""

REFRESH_AFTER = timedelta(seconds=60)
"""The oldest a pool's record is used at (by the admission's clock): then it is read again."""

REFRESH_ADMISSIONS = 1000
"""Admissions in a pool after which its record is read again, however young."""

_INSTANT = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class _Kept:
    """One pool's record as read at `read_at`, over the snapshot of its atoms then, with its shape."""

    demand: Demand | None
    read_at: datetime
    atoms: PoolAtoms
    shape: PoolShape


class RecordedDemand:
    """Admission's `service.ledger.ports.Gradients`: per pool, its recorded request sizes (read
    through `store` at most as often as the module docstring says) over its atoms' shape."""

    def __init__(
        self,
        store: StorePort[MeteringTx],
        *,
        refresh_after: timedelta = REFRESH_AFTER,
        refresh_admissions: int = REFRESH_ADMISSIONS,
    ) -> None:
        self._store = store
        self._refresh_after = refresh_after
        self._refresh_admissions = refresh_admissions
        self._kept: dict[str, _Kept] = {}
        self._uses: dict[str, int] = {}
        self._reading: set[str] = set()
        self._lock = threading.Lock()
        self.reads = 0
        """How many times the record was read from the store (what a test of the cache counts)."""

    def of_pool(
        self, pool_id: str, pool_atoms: PoolAtoms, now: datetime
    ) -> Callable[[Container[str]], FragmentationGrowth]:
        kept = self._current(pool_id, pool_atoms, now)

        def over(taken: Container[str]) -> FragmentationGrowth:
            return growth_of(kept.shape, taken, kept.demand)

        return over

    def _current(self, pool_id: str, pool_atoms: PoolAtoms, now: datetime) -> _Kept:
        with self._lock:
            kept = self._kept.get(pool_id)
            uses = self._uses.get(pool_id, 0) + 1
            self._uses[pool_id] = uses
            if kept is not None and (
                pool_id in self._reading  # another admission is reading it: this one uses what is kept
                or (
                    kept.atoms is pool_atoms
                    and kept.read_at <= now < kept.read_at + self._refresh_after
                    and uses <= self._refresh_admissions
                )
            ):
                return kept
            self._reading.add(pool_id)
            self._uses[pool_id] = 0
        # Outside the lock: admissions in other pools go on while this one reads.
        try:
            demand = self._read(pool_id, now)
            same = kept is not None and kept.atoms is pool_atoms
            shape = kept.shape if kept is not None and same else pool_shape(pool_atoms.atoms.values())
            fresh = _Kept(demand, now, pool_atoms, shape)
            with self._lock:
                self._kept[pool_id] = fresh
            return fresh
        finally:
            with self._lock:
                self._reading.discard(pool_id)

    def _read(self, pool_id: str, now: datetime) -> Demand | None:
        """The pool's request sizes held in the last `DEMAND_WINDOW`, up to and with `now` (a booking
        that starts this instant is part of the record, as the gauge counts it)."""
        with self._store.read() as tx:
            held = tx.usage.held_shapes(Window(now - DEMAND_WINDOW, now + _INSTANT), now)
        self.reads += 1
        return held_demand(h for h in held if h.pool_id == pool_id).get(pool_id)


__all__ = ["DEMAND_WINDOW", "REFRESH_ADMISSIONS", "REFRESH_AFTER", "RecordedDemand"]
