"""Slurm's GPU-seconds against ours, per job and per account, to the second."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from fractions import Fraction

from better_compute.domain.fleet.slurm import SlurmAccountingRecord
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.metering import MeteredBooking
from better_compute.domain.metering.slurm_reconcile import booking_seconds, gres_count, reconcile

T0 = datetime(2030, 1, 1, tzinfo=UTC)
PERIOD = Window(T0, T0 + timedelta(hours=1))
NOW = T0 + timedelta(hours=2)


def _record(
    job_id: int, account: str, gpus: int, start: int, end: int | None, *, shards: int = 0
) -> SlurmAccountingRecord:
    tres = [("cpu", "1")]
    if gpus:
        tres += [("gres/gpu:3g.40gb", str(gpus)), ("gres/gpu", str(gpus))]
    if shards:
        tres.append(("gres/shard", str(shards)))
    return SlurmAccountingRecord(
        job_id=job_id,
        name=f"job{job_id}",
        account=account,
        tres=tuple(tres),
        start=T0 + timedelta(seconds=start),
        end=None if end is None else T0 + timedelta(seconds=end),
        elapsed_seconds=(end or 0) - start,
        state="COMPLETED" if end is not None else "RUNNING",
    )


def _booking(allocation: str, n: int, start: timedelta, end: timedelta | None) -> MeteredBooking:
    return MeteredBooking(
        booking_id=f"b-{allocation}-{n}",
        reservation_id=allocation,
        tenant_id="t1",
        pool_id="p1",
        atom_id=f"a-{allocation}-{n}",
        cls="gpu.mig",
        gpu_model=None,
        meter="gpu.hours",
        share=Fraction(3, 7),
        span=Window(T0 + start, None if end is None else T0 + end),
    )


def test_a_typed_gpu_counts_once_and_a_shard_counts_as_an_atom() -> None:
    assert gres_count(_record(1, "a", 2, 0, 10)) == 2
    assert gres_count(_record(1, "a", 0, 0, 10, shards=3)) == 3


def test_microseconds_are_truncated_as_slurm_truncates_its_times() -> None:
    booking = _booking(
        "x", 0, timedelta(seconds=10, microseconds=900_000), timedelta(seconds=20, microseconds=1)
    )
    assert booking_seconds(booking, PERIOD, NOW) == 10


def test_matching_jobs_balance_per_job_and_per_account_and_others_count_for_slurm_only() -> None:
    records = [
        _record(1, "research", 2, 100, 400),  # ours: two atoms for 300 s
        _record(2, "research", 1, 3500, None),  # ours, still running: clipped at the period's end
        _record(3, "other", 1, 0, 50),  # not ours
    ]
    ours = [
        _booking(
            "alloc-1", 0, timedelta(seconds=100, microseconds=5), timedelta(seconds=400, microseconds=9)
        ),
        _booking("alloc-1", 1, timedelta(seconds=100), timedelta(seconds=400)),
        _booking("alloc-2", 0, timedelta(seconds=3500), None),
    ]
    result = reconcile(records, ours, {1: "alloc-1", 2: "alloc-2"}, PERIOD, NOW)
    assert result.balanced
    assert result.slurm_by_account == {"research": 600 + 100, "other": 50}
    assert result.matched_by_account == result.ours_by_account == {"research": 700}
    assert [(j.job_id, j.gres, j.slurm_seconds, j.our_seconds) for j in result.jobs] == [
        (1, 2, 600, 600),
        (2, 1, 100, 100),
    ]


def test_differences_are_per_job_to_the_second_and_a_job_slurm_never_saw_is_one() -> None:
    records = [_record(1, "research", 1, 100, 400)]
    ours = [
        _booking("alloc-1", 0, timedelta(seconds=100), timedelta(seconds=401)),  # released a second late
        _booking("alloc-9", 0, timedelta(seconds=0), timedelta(seconds=30)),
    ]
    result = reconcile(records, ours, {1: "alloc-1", 9: "alloc-9"}, PERIOD, NOW)
    assert [(j.job_id, j.difference, j.in_slurm) for j in result.differences] == [
        (1, 1, True),
        (9, 30, False),
    ]
    assert not result.balanced
