"""Slurm's accounting read back from a real slurmdbd (`sacct`) and reconciled with bookings of ours.

The cluster here has two `gpu:3g.40gb` and four shards on the first GPU, and records `gres/gpu`,
`gres/gpu:3g.40gb` and `gres/shard` (`AccountingStorageTRES`), as docs/slurm.md#accounting advises.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest

from better_compute.domain.fleet.slurm import SlurmAccountingRecord
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.metering import MeteredBooking
from better_compute.domain.metering.slurm_reconcile import reconcile, slurm_seconds
from better_compute.service.fleet.slurm import JobRequest
from better_compute.slurm.commands import SlurmCommands
from tests.slurm.cluster import Cluster
from tests.slurm.conftest import running_cluster

DEADLINE = 30.0
POLL = 0.2


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from running_cluster(tmp_path_factory, shards=4)


def _job(name: str, gres_name: str, gres_type: str | None, count: int, command: str) -> JobRequest:
    return JobRequest(name=name, command=command, gres_name=gres_name, gres_type=gres_type, gres_count=count)


def _records(
    slurm: SlurmCommands, start: datetime, ids: list[int], *, until_ended: bool = True
) -> dict[int, SlurmAccountingRecord]:
    """sacct's records of `ids`, polled until each has ended (slurmdbd hears of a job's end a moment
    after slurmctld)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        end = datetime.now(UTC) + timedelta(minutes=1)
        found = {r.job_id: r for r in slurm.accounting(start, end) if r.job_id in ids}
        done = len(found) == len(ids) and all(r.end is not None for r in found.values())
        if done or not until_ended or time.monotonic() > deadline:
            return found
        time.sleep(POLL)


def test_sacct_counts_a_typed_gpu_under_its_type_and_under_gpu_and_a_shard_as_a_shard(
    slurm: SlurmCommands,
) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    typed = slurm.submit(_job("typed", "gpu", "3g.40gb", 1, "sleep 2"))
    untyped = slurm.submit(_job("untyped", "gpu", None, 2, "sleep 1"))
    shard = slurm.submit(_job("shard", "shard", None, 2, "sleep 1"))
    records = _records(slurm, start, [typed, untyped, shard])
    assert set(records) == {typed, untyped, shard}, records

    by_id = records
    assert (by_id[typed].gres("gpu"), by_id[typed].gres("gpu", "3g.40gb")) == (1, 1)
    # A job asking for any gpu is given typed ones, and counted under the type it got too.
    assert (by_id[untyped].gres("gpu"), by_id[untyped].gres("gpu", "3g.40gb")) == (2, 2)
    assert (by_id[shard].gres("shard"), by_id[shard].gres("gpu")) == (2, 0)
    assert all(r.state == "COMPLETED" and r.account == "root" for r in records.values())

    period = Window(start, datetime.now(UTC) + timedelta(minutes=1))
    now = datetime.now(UTC)
    for record in records.values():
        assert record.start is not None and record.end is not None
        seconds = int((record.end - record.start).total_seconds())
        assert record.elapsed_seconds == seconds
        count = record.gres("gpu") + record.gres("shard")
        assert slurm_seconds(record, period, now) == seconds * count
    # A window that cuts a job's run counts only the part inside it.
    record = by_id[typed]
    assert record.start is not None and record.end is not None
    inside = min(1, record.elapsed_seconds)  # the seconds of its run the window leaves out
    cut = Window(record.start + timedelta(seconds=inside), record.end + timedelta(minutes=1))
    assert slurm_seconds(record, cut, now) == record.elapsed_seconds - inside


def test_a_running_job_has_no_end_yet_and_a_cancelled_one_reads_cancelled(slurm: SlurmCommands) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    job_id = slurm.submit(_job("long", "gpu", "3g.40gb", 1, "sleep 60"))
    deadline = time.monotonic() + DEADLINE
    running = None
    while running is None or running.start is None:
        assert time.monotonic() < deadline, "the job never started in sacct"
        running = _records(slurm, start, [job_id], until_ended=False).get(job_id)
        time.sleep(POLL)
    assert (running.state, running.end) == ("RUNNING", None)
    slurm.cancel(job_id)
    ended = _records(slurm, start, [job_id])[job_id]
    assert ended.state == "CANCELLED" and ended.end is not None


def _booking(allocation_id: str, n: int, start: datetime, end: datetime) -> MeteredBooking:
    return MeteredBooking(
        booking_id=f"{allocation_id}-{n}",
        reservation_id=allocation_id,
        tenant_id="t-research",
        pool_id="pool-slurm",
        atom_id=f"atom-{allocation_id}-{n}",
        cls="gpu.mig",
        gpu_model="A100-80GB",
        meter="gpu.hours",
        share=Fraction(3, 7),
        span=Window(start, end),
    )


def test_our_bookings_for_the_same_jobs_reconcile_with_sacct_to_the_second(slurm: SlurmCommands) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    one = slurm.submit(_job("alloc-one", "gpu", "3g.40gb", 1, "sleep 1"))
    two = slurm.submit(_job("alloc-two", "gpu", "3g.40gb", 2, "sleep 1"))
    records = _records(slurm, start, [one, two])
    r1, r2 = records[one], records[two]
    assert r1.start and r1.end and r2.start and r2.end
    # What the ledger would hold: bookings bound when Slurm started the job, ended when it ended,
    # stamped to the microsecond (truncated to Slurm's second before comparing). Job two's second
    # atom is released a second late: the one difference.
    ours = [
        _booking(
            "res-one", 0, r1.start + timedelta(microseconds=400_000), r1.end + timedelta(microseconds=7)
        ),
        _booking("res-two", 0, r2.start, r2.end),
        _booking("res-two", 1, r2.start, r2.end + timedelta(seconds=1)),
    ]
    period = Window(start, datetime.now(UTC) + timedelta(minutes=1))
    result = reconcile(records.values(), ours, {one: "res-one", two: "res-two"}, period, datetime.now(UTC))
    assert result.slurm_by_account["root"] == r1.elapsed_seconds + 2 * r2.elapsed_seconds
    assert [(j.job_id, j.difference) for j in result.differences] == [(two, 1)]
    assert result.ours_by_account["root"] == result.matched_by_account["root"] + 1

    exact = reconcile(records.values(), ours[:2], {one: "res-one"}, period, datetime.now(UTC))
    assert exact.balanced and exact.ours_by_account == exact.matched_by_account
