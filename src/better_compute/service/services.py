"""The parts every use case's caller shares, built once per process by the composition root.

The API and, later, the reconcilers run over one `Services`: the same store, the same clock and id
source, the same booking index (a cache of the ledger, so one per process), the same memory of whose
tokens were seen, and the same threads for admission. Building it is `entrypoints/server.py`'s job
alone; nothing below the entry points makes a clock, an id or a cache of its own, so a test that
wants a fixed time or known ids builds the same thing with fakes in their place.
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor
from dataclasses import dataclass, field

from better_compute.service.endpoints.invocations import Balancer
from better_compute.service.fleet.report_batches import ReportBatches
from better_compute.service.kernel.clock import Clock
from better_compute.service.kernel.ids import Ids
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.metering.slurm_job_ids import NoSlurmJobIds, SlurmJobIds
from better_compute.service.ops.replay import Scratch, refuse_replay
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.placement.recorded_demand import RecordedDemand
from better_compute.service.tenancy.credentials import TokenMemory
from better_compute.service.tx import Tx


def _already_set() -> threading.Event:
    ready = threading.Event()
    ready.set()
    return ready


@dataclass(frozen=True)
class Services:
    """One process's wiring: what the composition root hands `create_app` (and the reconcilers)."""

    store: StorePort[Tx]
    clock: Clock
    ids: Ids
    index: BookingIndex
    """The in-process interval index over the ledger's live bookings (service.ledger.booking_index)."""
    tokens: TokenMemory
    """Whom the tokens this process has seen belong to (never whether they are revoked)."""
    admission: Executor | None
    """Where reservations are admitted: a few threads that keep their database connections, so that
    a process goes on serving requests while one waits for the database; None: on the event loop
    (SQLite, whose one writer the threads would only queue for)."""
    gradients: RecordedDemand | None = None
    """Each pool's recorded request sizes, which admission's choice breaks ties between equally good
    GPUs by (service.placement.recorded_demand); None: such ties go to the smallest ids."""
    stock: Stock = field(default_factory=Stock)
    """Each pool's free devices per device class, for placement (service.placement.placement_stock)."""
    placement_wakeup: threading.Event = field(default_factory=threading.Event)
    """Set by writes that may free capacity or quota: the placement retry loop wakes on it."""
    relayout_wakeup: threading.Event = field(default_factory=threading.Event)
    """Set once a node's `ReplicaState` report is taken: the loop that resumes relayouts waiting
    for moved copies to be ready (service.endpoints.relayout_resume) wakes on it."""
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set when the process begins to shut down: waits (a node's spec long poll) answer at once,
    so that shutting down does not wait out every node's poll."""
    reports: ReportBatches = field(default_factory=ReportBatches)
    """Signed node reports being written, batched as they arrive (service.fleet.report_batches)."""
    invocations: Balancer = field(default_factory=Balancer)
    """Requests outstanding per endpoint copy from this process, for `endpoints.invoke`'s choice
    (service.endpoints.invocations)."""
    slurm_job_ids: SlurmJobIds = field(default_factory=NoSlurmJobIds)
    """Slurm's job id of each allocation that is a Slurm job (`usage.list`'s `slurmJobIds`)."""
    scratch: Scratch = field(default=refuse_replay)
    """Where a replay runs: a throwaway store with the replayed fleet (service.ops.replay); the
    composition root's opens a fresh SQLite file. By default replays are refused."""
    ready: threading.Event = field(default_factory=_already_set)
    """Set once the process has loaded what its hot path needs (`service.warmup`): until then
    `/healthz` and `/readyz` answer `starting` (503). Set from the start where nothing warms it
    (an app driven in-process without its lifespan)."""

    def close(self) -> None:
        """Stop the admission threads, once the work they were given is done. The store is closed
        by whoever opened it."""
        if self.admission is not None:
            self.admission.shutdown(wait=True)


__all__ = ["Services"]
