"""Which Slurm job holds an allocation: what `usage export --slurm-job-ids` adds to each usage row.

On a Slurm node every hold of ours is a Slurm job (ADR 0015); the job id is recorded when the job is
submitted, adopted or booked as an external hold, by the Slurm follower (`slurm_job_ids`, kept after
Slurm forgets the job). This is the port the usage listing reads them through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from better_compute.service.kernel.ports import StorePort

MAX_ALLOCATIONS = 1000
"""The most allocations asked of the store in one query: one page of usage rows (more go in several)."""


class SlurmJobIds(Protocol):
    """Slurm's job id of each allocation that is (or was) a Slurm job."""

    def job_ids(self, allocation_ids: Sequence[str]) -> Mapping[str, int]:
        """The job id of each of `allocation_ids` that has one; the others are left out."""
        ...


class NoSlurmJobIds:
    """No allocation has a Slurm job: the answer while no record of submitted jobs is kept (a
    fleet without a Slurm cluster, or a server that does not follow one yet)."""

    def job_ids(self, allocation_ids: Sequence[str]) -> Mapping[str, int]:
        return {}


class _JobIdRepo(Protocol):
    def job_ids(self, allocation_ids: Sequence[str]) -> dict[str, int]: ...


class _JobIdsTx(Protocol):
    @property
    def slurm_jobs(self) -> _JobIdRepo: ...


class StoredSlurmJobIds:
    """The ids the Slurm follower kept in the store, read in a transaction of their own."""

    def __init__(self, store: StorePort[_JobIdsTx]) -> None:
        self.store = store

    def job_ids(self, allocation_ids: Sequence[str]) -> Mapping[str, int]:
        found: dict[str, int] = {}
        if not allocation_ids:
            return found
        with self.store.read() as tx:
            for at in range(0, len(allocation_ids), MAX_ALLOCATIONS):
                found.update(tx.slurm_jobs.job_ids(allocation_ids[at : at + MAX_ALLOCATIONS]))
        return found
