"""A live relayout that waits for moved copies to be ready goes on by itself once they are
(docs/endpoints.md#changing-the-layout-live).

Before re-cutting an instance, a relayout moves the copies of components that run a container off
it, and waits (`Updating` with its reason) until they are ready where they went
(`endpoint_relayout.next_cut_in`): cutting sooner would leave a component below `minCopies` ready
copies. What tells it they are is a node's signed `ReplicaState` report; its ingest appends
`replica.readiness_changed` in its own transaction (`service.fleet.node_reports`) and does no more,
since it holds only its node's lock, and the relayout's step takes the endpoint's node locks in id
order, before the endpoint's row, as `endpoints.update` does: taking them there could wait in a
cycle on PostgreSQL.

So the step is taken here, from the event log: a `Follower` (the same tail as the booking index
and the placement retry) feeds `_Watcher` each event once; a copy that became ready names its
component, and each waiting endpoint that has that component takes its next step (`resume`), in a
transaction of its own, under the locks in `endpoints.update`'s order, deciding on what it reads
under them. Seen twice, or by two processes at once, an event changes nothing more: the second
step finds the moved copies moved, or the instance being cut (one at a time), and the other waits
on the first's locks before it reads. A process that starts (or a pass that failed) looks at every
waiting endpoint once, so a report committed while none watched is not lost.

The server's report route sets `wakeup` once a `ReplicaState` report is taken; the wait between
two looks at the log (`interval`) only decides how soon another process's commit is seen, never
whether a relayout goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from better_compute.domain.endpoints.endpoints import copy_of
from better_compute.domain.fleet.events import ReplicaReadinessChanged
from better_compute.domain.kernel.errors import Unavailable
from better_compute.domain.kernel.events import LoggedEvent
from better_compute.service.endpoints import endpoint_relayout
from better_compute.service.endpoints.ports import EndpointsTx
from better_compute.service.kernel.clock import Clock
from better_compute.service.kernel.event_tail import Follower
from better_compute.service.kernel.ports import StorePort

_log = logging.getLogger(__name__)

INTERVAL = 2.0
"""Seconds between two looks at the log when nothing in this process wakes the resumer."""

BATCH = 1000
"""Updating endpoints looked at per pass, at most (an endpoint is `Updating` only while an
operator's relayout rolls; the rest are looked at on the next pass)."""


def resume(store: StorePort[EndpointsTx], name: str, now: datetime) -> str | None:
    """Take the next step of endpoint `name`'s relayout when it waits (`Updating` with a reason),
    in a transaction of its own: its nodes' locks (in id order), then its row's, as
    `endpoints.update` takes them; then the step decides on what it reads under them. Answers the
    node whose cut started, if one did; moving copies ahead of a cut is a step too."""
    with store.begin() as tx:
        tx.nodes.lock([i.node_id for i in tx.endpoints.instances(name)])
        record = tx.endpoints.get(name, lock=True)
        if record is None or record.status != "Updating" or record.reason is None:
            return None  # not waiting: rolling under the gate (which hands it on), done or gone
        return endpoint_relayout.next_cut_in(tx, name, now)


@dataclass
class _Watcher:
    """The resumer as the follower sees it: the components a copy of which became ready, or
    `everything` (a load: what happened before it is not known)."""

    everything: bool = True
    components: set[str] = field(default_factory=set)

    def load(self, tx: EndpointsTx) -> None:
        self.everything = True

    def apply(self, logged: LoggedEvent) -> None:
        event = logged.event
        if isinstance(event, ReplicaReadinessChanged) and event.ready:
            copy = copy_of(event.subject)
            if copy is not None:
                self.components.add(copy[0])


@dataclass
class Resumer:
    """Resumes waiting relayouts as the copies they wait for become ready (see the module)."""

    store: StorePort[EndpointsTx]
    clock: Clock
    wakeup: threading.Event = field(default_factory=threading.Event)
    interval: float = INTERVAL
    _watcher: _Watcher = field(default_factory=_Watcher)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._follower: Follower[EndpointsTx] = Follower(self._watcher, self._lock, time.monotonic)

    def tick(self) -> dict[str, str | None]:
        """Read the log; each waiting endpoint with a copy that became ready takes its next step.
        Answers the endpoints stepped, each with the node whose cut started (None: it still waits,
        perhaps with more copies moved)."""
        with self.store.read() as tx:
            self._follower.sync(tx)
            with self._lock:
                everything, woken = self._watcher.everything, set(self._watcher.components)
                self._watcher.everything, self._watcher.components = False, set()
            if not everything and not woken:
                return {}
            try:
                waiting = [r.name for r in tx.endpoints.by_status(["Updating"], BATCH) if r.reason]
                if not everything:
                    waiting = [
                        name
                        for name in waiting
                        if any(c.name in woken for c in tx.components.of_endpoint(name))
                    ]
            except BaseException:
                self._again()
                raise
        stepped: dict[str, str | None] = {}
        for name in waiting:
            try:
                stepped[name] = resume(self.store, name, self.clock())
            except BaseException:
                self._again()  # what was read is not lost: the next pass looks at every endpoint
                raise
        return stepped

    def _again(self) -> None:
        with self._lock:
            self._watcher.everything = True

    def run(self, stopping: threading.Event, pause: Callable[[float], bool] | None = None) -> None:
        """Pass after pass until `stopping` is set, each after a wake-up or `interval`."""
        wait = pause or self.wakeup.wait
        while not stopping.is_set():
            self.wakeup.clear()
            try:
                self.tick()
            except Unavailable:  # the store logs when an outage starts and ends; the next pass tries again
                pass
            except Exception:  # a fault of ours: logged, and the next pass tries again
                _log.exception("resuming relayouts failed")
            wait(self.interval)


__all__ = ["BATCH", "INTERVAL", "Resumer", "resume"]
