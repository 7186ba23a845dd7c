"""Which atoms a live booking holds at an instant, per GPU, kept up with the scratch store's event
log: what replay's fragmentation gauge reads after each instant (`service.ops.replay`).

The gauge asks at every instant of a replay how much of each GPU is free. Reading every live
booking of the ledger for that (what the gauge did first) costs the whole ledger at every instant:
a trace of 7,000 tasks over 124,240 slots spent nearly all of its replay there. This follows the
ledger's events instead (`event_tail.Follower`, as the booking index does, with the ledger's own
rules for a release: `domain.ledger.ledger.released`), and says which GPUs may have changed since it
was last asked: those a booking event touched, and those where a booking's start or end has come
since (time alone frees an atom: a reservation that ends leaves no event). Only those are counted
again; the answer is the ledger's, as `LedgerTx.live_bookings` gives it.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from better_compute.domain.kernel.events import LoggedEvent
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.events import (
    LedgerBooked,
    LedgerCancelled,
    LedgerExtended,
    LedgerRebound,
    LedgerReleased,
    PartitionReleased,
)
from better_compute.domain.ledger.ledger import released
from better_compute.service.kernel.event_tail import Follower
from better_compute.service.ledger.booking_index import BOOKINGS_AND_ATOMS_KEPT
from better_compute.service.ops.ports import OpsTx

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(slots=True)
class _Booking:
    """One live booking row: its atom, window, atom class and the GPU it was booked on."""

    atom: str
    start: datetime
    end: datetime | None
    cls: str | None
    gpu: str | None

    def holds(self, now: datetime) -> bool:
        return self.start <= now and (self.end is None or now < self.end)


class HeldAtoms:
    """The live bookings of a fixed set of atoms (`gpu_of`: each atom's GPU), filed by GPU: by the
    booked atom's GPU, and a whole-GPU booking (`gpu`) also by the GPU it names. Fed by a `Follower`
    (`sync`); `changed(now)` says which GPUs to count again, `booked(gpu, now)` counts one."""

    def __init__(self, gpu_of: Mapping[str, str]) -> None:
        self._gpu_of = gpu_of
        self._lock = threading.Lock()
        self._follower: Follower[OpsTx] = Follower(self, self._lock)
        self._by_allocation: dict[str, list[_Booking]] = {}
        self._on_gpu: dict[str, dict[str, list[_Booking]]] = {}
        self._edges: list[tuple[datetime, str]] = []
        """A heap of (a booking's start or end, a GPU it is filed under): when time alone changes it."""
        self._changed: set[str] = set()
        self.atoms_changed = False
        """Whether an event since the first load may have changed some atom (the booking index's
        rule: any but a booking's and `BOOKINGS_AND_ATOMS_KEPT`)."""

    # -- kept up by the follower -----------------------------------------------------------------
    def sync(self, tx: OpsTx) -> None:
        """Catch up with the ledger: a full load the first time, the event tail afterwards."""
        self._follower.sync(tx)

    def load(self, tx: OpsTx) -> None:
        for allocation in list(self._by_allocation):
            self._drop(allocation)
        for b in tx.ledger.live_bookings(_EPOCH):
            self._add(b.allocation_id, [b.atom_id], b.starts_at, b.ends_at, b.cls, b.gpu_id)

    def apply(self, logged: LoggedEvent) -> None:
        event = logged.event
        if isinstance(event, LedgerBooked):
            held = {b.atom for b in self._by_allocation.get(event.subject, ())}
            fresh = [a for a in event.atoms if a not in held]  # one event per row; a replay is a no-op
            if fresh:
                self._add(event.subject, fresh, event.start, event.end, event.cls, event.gpu_id)
        elif isinstance(event, LedgerReleased | PartitionReleased):
            for b in self._drop(event.subject):
                kept = released(Window(b.start, b.end), event.at)
                if kept is not None:
                    self._add(event.subject, [b.atom], kept.start, kept.end, b.cls, b.gpu)
        elif isinstance(event, LedgerExtended):
            for b in self._drop(event.subject):
                self._add(event.subject, [b.atom], b.start, event.end, b.cls, b.gpu)
        elif isinstance(event, LedgerCancelled):
            self._drop(event.subject)
        elif isinstance(event, LedgerRebound):
            targets: dict[str, tuple[str, str | None]] = {
                str(m[0]): (str(m[1]), str(m[2])) for m in event.moves if len(m) == 3
            }
            if any(b.atom in targets for b in self._by_allocation.get(event.subject, ())):
                for b in self._drop(event.subject):
                    atom, gpu = targets.get(b.atom, (b.atom, b.gpu))
                    self._add(event.subject, [atom], b.start, b.end, b.cls, gpu)
        elif not isinstance(event, BOOKINGS_AND_ATOMS_KEPT):
            self.atoms_changed = True

    def _filed_under(self, b: _Booking) -> set[str]:
        gpus = set()
        if b.atom in self._gpu_of:
            gpus.add(self._gpu_of[b.atom])
            if b.cls == "gpu" and b.gpu is not None:
                gpus.add(b.gpu)
        return gpus

    def _add(
        self,
        allocation: str,
        atoms: Iterable[str],
        start: datetime,
        end: datetime | None,
        cls: str | None,
        gpu: str | None,
    ) -> None:
        mine = self._by_allocation.setdefault(allocation, [])
        for atom in atoms:
            b = _Booking(atom, start, end, cls, gpu)
            mine.append(b)
            for g in self._filed_under(b):
                self._on_gpu.setdefault(g, {}).setdefault(allocation, []).append(b)
                self._changed.add(g)
                heapq.heappush(self._edges, (start, g))
                if end is not None:
                    heapq.heappush(self._edges, (end, g))

    def _drop(self, allocation: str) -> list[_Booking]:
        dropped = self._by_allocation.pop(allocation, [])
        for b in dropped:
            for g in self._filed_under(b):
                on_gpu = self._on_gpu.get(g)
                if on_gpu is not None and on_gpu.pop(allocation, None) is not None and not on_gpu:
                    del self._on_gpu[g]
                self._changed.add(g)
        return dropped

    # -- reading ---------------------------------------------------------------------------------
    def changed(self, now: datetime) -> set[str]:
        """The GPUs whose bookings may hold other atoms at `now` than when last asked (every GPU a
        booking is filed under, the first time); asked with instants that never go back."""
        with self._lock:
            while self._edges and self._edges[0][0] <= now:
                self._changed.add(heapq.heappop(self._edges)[1])
            out, self._changed = self._changed, set()
        return out

    def booked(self, gpu: str, now: datetime) -> tuple[int, bool]:
        """Of the GPU's atoms (of those kept), how many a live booking holds at `now`, and whether a
        whole-GPU booking of a kept atom names the GPU at `now`."""
        held, whole = self.held(gpu, now)
        return len(held), whole

    def held(self, gpu: str, now: datetime) -> tuple[set[str], bool]:
        """Of the GPU's atoms (of those kept), those a live booking holds at `now`, and whether a
        whole-GPU booking of a kept atom names the GPU at `now`."""
        with self._lock:
            held: set[str] = set()
            whole = False
            on_gpu = self._on_gpu.get(gpu, {})
            for allocation, bookings in list(on_gpu.items()):
                # Asked with instants that never go back: a booking over by now never holds again
                # (an event that moves its end files it anew).
                live = [b for b in bookings if b.end is None or now < b.end]
                if len(live) < len(bookings):
                    if live:
                        on_gpu[allocation] = live
                    else:
                        del on_gpu[allocation]
                for b in live:
                    if not b.holds(now):
                        continue
                    if self._gpu_of.get(b.atom) == gpu:
                        held.add(b.atom)
                    if b.cls == "gpu" and b.gpu == gpu:
                        whole = True
            return held, whole


__all__ = ["HeldAtoms"]
