"""Placing again what waits: workloads whose deployments are short of their share (`pending`,
`admitted`) or whose replicas no cluster took, retried when capacity or quota may have freed
(docs/placement.md#retry; seed 001: "A refused deployment sits in pending phase until capacity frees up"); and
`Failed` endpoints, short of idle nodes when created, which take their nodes then
(`service.endpoints.endpoints.retry`).

What wakes a retry is the event log, read through the same `Follower` as the booking index: an event
that can free devices or headroom (a release, a cancel, a deleted or scaled workload, a quota row, a
node's inventory, a cluster's phase, a policy) marks the retrier dirty, and so does a booking whose
end has passed since the last retry (time frees devices too: a reservation that ends). The server's
own writes set `wakeup` as they commit; the wait between two looks at the log (`interval`) only
decides how soon another process's commit is seen, never whether a workload is placed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from better_compute.domain.fleet.events import AllocationBound, NodeJoined, ReplicaReadinessChanged
from better_compute.domain.kernel.errors import Unavailable
from better_compute.domain.kernel.events import LoggedEvent
from better_compute.domain.ledger.events import LedgerBooked, PartitionBooked, ReservationCreated
from better_compute.domain.ops.events import DoctorRun
from better_compute.domain.placement.events import ReplicasTerminating, WorkloadCreated, WorkloadDecided
from better_compute.service.endpoints import endpoints
from better_compute.service.kernel.clock import Clock
from better_compute.service.kernel.event_tail import Follower
from better_compute.service.kernel.ports import KernelTx
from better_compute.service.ops.ports import OpsTx
from better_compute.service.placement import workloads

_log = logging.getLogger(__name__)

INTERVAL = 2.0
"""Seconds between two looks at the log when nothing in this process wakes the retrier."""

NOT_FREEING = (
    LedgerBooked,
    PartitionBooked,
    ReplicasTerminating,
    ReservationCreated,
    WorkloadCreated,
    WorkloadDecided,
    AllocationBound,
    NodeJoined,
    ReplicaReadinessChanged,
    DoctorRun,
)
"""Events that take devices or tell of nothing placement counts: every other event may free some.
A deployment's update stays a wake-up: one left `admitted` lost atoms to a request of its own
process that may roll back, freeing them with no event of its own."""


@dataclass
class _Watcher:
    """The retrier as the follower sees it: any freeing event marks it dirty."""

    dirty: bool = True

    def load(self, tx: KernelTx) -> None:
        self.dirty = True

    def apply(self, logged: LoggedEvent) -> None:
        if not isinstance(logged.event, NOT_FREEING):
            self.dirty = True


@dataclass
class Retrier:
    wiring: workloads.Wiring[OpsTx]
    clock: Clock
    wakeup: threading.Event = field(default_factory=threading.Event)
    interval: float = INTERVAL
    _watcher: _Watcher = field(default_factory=_Watcher)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _last: datetime | None = None

    def __post_init__(self) -> None:
        self._follower = Follower(self._watcher, self._lock, time.monotonic)

    def tick(self) -> int:
        """Read the log; if something may have freed devices or quota, place again what waits.
        Returns how many workloads were fully placed, and `Failed` endpoints took their nodes, by
        this pass."""
        now = self.clock()
        with self.wiring.store.read() as tx:
            self._follower.sync(tx)
            ended = self._last is not None and tx.ledger.any_ended_between(self._last, now)
        with self._lock:
            due, self._watcher.dirty = self._watcher.dirty or ended, False
        self._last = now
        if not due:
            return 0
        placed = workloads.retry(self.wiring, now)
        return placed + endpoints.retry(self.wiring.store, now)

    def run(self, stopping: threading.Event, pause: Callable[[float], bool] | None = None) -> None:
        """Pass after pass until `stopping` is set, each after a wake-up or `interval`."""
        wait = pause or self.wakeup.wait
        while not stopping.is_set():
            try:
                self.tick()
            except Unavailable:  # the store logs when an outage starts and ends; the next pass tries again
                pass
            except Exception:  # a fault of ours: logged, and the next pass tries again
                _log.exception("placement retry failed")
            wait(self.interval)
            self.wakeup.clear()


__all__ = ["INTERVAL", "NOT_FREEING", "Retrier"]
