"""Slurm's accounting against ours: GPU-seconds per account for a period, and per job, to the second.

On a Slurm node each hold of ours is a Slurm job (ADR 0015), so one piece of work is counted twice:
by slurmdbd (`sacct`: the job's `AllocTRES` and its start and end) and by our ledger (the job's
allocation's bookings, one per atom). They must agree (issue 40, docs/slurm.md#accounting):

- a job's Slurm count is its GRES count (`gres/gpu`, plus `gres/shard` for shared slots: each MIG
  instance, whole GPU or slot is one GRES, as each is one atom of ours) times the whole seconds of its
  allocation inside the period (a running job's up to `now`);
- our count for the same job is, for each booking of its allocation, the whole seconds it was held in
  the period. Slurm keeps times in whole seconds (time_t, truncated), so each end of a booking's
  window is truncated to the second the same way before the two are compared.

Which allocation is which job is the caller's (the follower records it when it submits or adopts a
job); a job with no allocation is Slurm's alone, counted in `slurm_by_account` but not compared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from better_compute.domain.fleet.slurm import SlurmAccountingRecord
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.metering import MeteredBooking, held

GRES_COUNTED = ("gpu", "shard")
"""The GRES whose count is a job's number of atoms: a `gpu` is a whole GPU or a MIG instance, a
`shard` a slot of a shared GPU (docs/slurm.md#atoms-as-gres)."""


@dataclass(frozen=True, slots=True)
class JobSeconds:
    """One job of ours in the period: Slurm's GPU-seconds and ours, and how far ours is from Slurm's."""

    job_id: int
    allocation_id: str
    account: str
    """The job's Slurm account (empty when sacct has no record of the job)."""
    gres: int
    slurm_seconds: int
    our_seconds: int
    in_slurm: bool
    """False when sacct listed no such job in the period (never submitted, or purged)."""

    @property
    def difference(self) -> int:
        """Our GPU-seconds less Slurm's: positive where we count more."""
        return self.our_seconds - self.slurm_seconds


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """GPU-seconds of a period per account and per job."""

    period: Window
    slurm_by_account: Mapping[str, int]
    """Every job sacct reports, ours or not, per account."""
    matched_by_account: Mapping[str, int]
    """Slurm's GPU-seconds of our jobs only, per account: what `ours_by_account` must equal."""
    ours_by_account: Mapping[str, int]
    """Our GPU-seconds for the same jobs, per the job's Slurm account."""
    jobs: tuple[JobSeconds, ...]

    @property
    def differences(self) -> tuple[JobSeconds, ...]:
        """The jobs whose two counts differ by a second or more."""
        return tuple(job for job in self.jobs if job.difference != 0)

    @property
    def balanced(self) -> bool:
        return not self.differences


def gres_count(record: SlurmAccountingRecord, names: Sequence[str] = GRES_COUNTED) -> int:
    """How many atoms' worth of GRES the job held (`gres/gpu` + `gres/shard`, untyped totals: a typed
    GPU counts under `gres/gpu` too)."""
    return sum(record.gres(name) for name in names)


def slurm_seconds(record: SlurmAccountingRecord, period: Window, now: datetime) -> int:
    """Slurm's GPU-seconds of one job in the period: GRES count x whole seconds held in it."""
    assert period.end is not None, "a period has an end"
    return gres_count(record) * record.held(period.start, period.end, now)


def _second(at: datetime) -> datetime:
    return at.replace(microsecond=0)


def booking_seconds(booking: MeteredBooking, period: Window, now: datetime) -> int:
    """Whole seconds a booking was held in the period, its ends truncated to the second as Slurm's are."""
    span = Window(
        _second(booking.span.start), None if booking.span.end is None else _second(booking.span.end)
    )
    window = held(span, Window(_second(period.start), _second(period.end or now)), _second(now))
    return 0 if window is None or window.end is None else int((window.end - window.start).total_seconds())


def reconcile(
    records: Iterable[SlurmAccountingRecord],
    bookings: Iterable[MeteredBooking],
    allocation_of_job: Mapping[int, str],
    period: Window,
    now: datetime,
) -> Reconciliation:
    """Compare sacct's `records` for `period` with our `bookings` (those of the allocations in
    `allocation_of_job`, by `reservation_id`, which is the allocation's id), job by job."""
    by_job = {record.job_id: record for record in records}
    slurm_by_account: dict[str, int] = {}
    for record in by_job.values():
        seconds = slurm_seconds(record, period, now)
        if seconds:
            slurm_by_account[record.account] = slurm_by_account.get(record.account, 0) + seconds
    ours: dict[str, int] = {}
    for booking in bookings:
        ours[booking.reservation_id] = ours.get(booking.reservation_id, 0) + booking_seconds(
            booking, period, now
        )
    jobs = []
    matched: dict[str, int] = {}
    mine: dict[str, int] = {}
    for job_id, allocation_id in sorted(allocation_of_job.items()):
        found = by_job.get(job_id)
        account = found.account if found is not None else ""
        theirs = slurm_seconds(found, period, now) if found is not None else 0
        our = ours.get(allocation_id, 0)
        jobs.append(
            JobSeconds(
                job_id=job_id,
                allocation_id=allocation_id,
                account=account,
                gres=gres_count(found) if found is not None else 0,
                slurm_seconds=theirs,
                our_seconds=our,
                in_slurm=found is not None,
            )
        )
        if theirs:
            matched[account] = matched.get(account, 0) + theirs
        if our:
            mine[account] = mine.get(account, 0) + our
    return Reconciliation(
        period=period,
        slurm_by_account=slurm_by_account,
        matched_by_account=matched,
        ours_by_account=mine,
        jobs=tuple(jobs),
    )
