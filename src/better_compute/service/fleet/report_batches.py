"""Group commit for signed node reports: the reports a process receives while it is writing others
are written together, in one batch (`service.fleet.node_reports.accept_batch`).

Ten thousand nodes that start together each send their inventory at once; one transaction per node
cost each of them four times what its rows do. Here no report waits on a timer: a request whose
report finds nobody writing writes it at once (it *leads*); those that arrive meanwhile queue, and
the leader takes them all (one per node, up to `MAX_BATCH`) as its next batch. A leader whose own
report is answered hands the lead to the oldest report still queued, so no request serves others
for longer than it takes to write its own batch and the next.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from better_compute.domain.fleet.node_reports import InventoryReported
from better_compute.service.fleet.node_reports import Accepted, Outcome, Sent, accept, accept_batch
from better_compute.service.fleet.ports import FleetTx
from better_compute.service.kernel.ports import StorePort

BATCHED_KINDS = frozenset({InventoryReported.KIND})
"""The kinds of report written in batches: a node's inventory is a fleet's worth of GPUs and atoms
when nodes start together; the other kinds are a row or two each."""

MAX_BATCH = 250
"""Reports written in one transaction at most: a batch holds its nodes' row locks until it commits,
and each of its reports waits for all of them."""

Writer = Callable[[StorePort[FleetTx], list[Sent]], list[Outcome]]


@dataclass(eq=False)
class _Waiting:
    sent: Sent
    woken: threading.Event = field(default_factory=threading.Event)
    """Set once the report is answered, or once it is handed the lead."""
    leads: bool = False
    outcome: Outcome | BaseException | None = None


class ReportBatches:
    """One process's queue of reports being written; thread-safe (reports arrive on the API's
    threads, and each call blocks until its own report is answered)."""

    def __init__(self, write: Writer = accept_batch, max_batch: int = MAX_BATCH) -> None:
        self._write = write
        self._max = max_batch
        self._lock = threading.Lock()
        self._queue: deque[_Waiting] = deque()
        self._leading = False

    def accept(self, store: StorePort[FleetTx], sent: Sent) -> Accepted:
        """Accept `sent` (as `node_reports.accept` would): an inventory report in a batch with
        whatever else is queued, a report of any other kind (small, and waited on: a binding, a
        scrub) at once, on its own."""
        if sent.kind not in BATCHED_KINDS:
            return accept(store, sent.signed, sent.read, sent.now)
        me = _Waiting(sent)
        with self._lock:
            self._queue.append(me)
            if not self._leading:
                self._leading = me.leads = True
        while True:
            if me.leads and me.outcome is None:
                self._lead(store, me)
            me.woken.wait()
            if me.outcome is not None:
                break
            me.woken.clear()  # handed the lead: go round and write
        if isinstance(me.outcome, BaseException):
            raise me.outcome
        return me.outcome

    def _lead(self, store: StorePort[FleetTx], me: _Waiting) -> None:
        """Write batches until `me` is answered, then hand the lead on (or drop it). Whatever goes
        wrong, every report taken is answered and the lead is passed on: a report is never left
        waiting for a leader that has gone."""
        try:
            while me.outcome is None:
                batch = self._take()
                if not batch:  # (never: the leader's own report is the oldest queued)
                    break
                try:
                    outcomes: list[Outcome | BaseException] = list(
                        self._write(store, [w.sent for w in batch])
                    )
                    if len(outcomes) != len(batch):
                        raise RuntimeError(f"{len(outcomes)} outcomes for a batch of {len(batch)} reports")
                except BaseException as error:  # the database failed: every report of the batch hears it
                    outcomes = [error] * len(batch)
                for waiting, outcome in zip(batch, outcomes, strict=True):
                    waiting.outcome = outcome
                    if waiting is not me:
                        waiting.woken.set()
        finally:
            with self._lock:
                if me.outcome is None:  # (an error outside the write: nothing was answered for me)
                    me.outcome = RuntimeError("the report could not be written")
                if self._queue:
                    heir = self._queue[0]
                    heir.leads = True
                    heir.woken.set()
                else:
                    self._leading = False
            me.woken.set()

    def _take(self) -> list[_Waiting]:
        """The next batch: the oldest queued report of each node, up to `MAX_BATCH`, in order."""
        with self._lock:
            batch: list[_Waiting] = []
            nodes: set[str] = set()
            kept: deque[_Waiting] = deque()
            while self._queue:
                waiting = self._queue.popleft()
                if len(batch) < self._max and waiting.sent.signed.node not in nodes:
                    nodes.add(waiting.sent.signed.node)
                    batch.append(waiting)
                else:
                    kept.append(waiting)
            self._queue = kept
            return batch


__all__ = ["BATCHED_KINDS", "MAX_BATCH", "ReportBatches"]
