"""Which Slurm job holds an allocation: what `usage export --slurm-job-ids` adds to each usage row.

On a Slurm node every hold of ours is a Slurm job (ADR 0015); the job id is recorded when the job is
submitted or adopted, by the part of the server that follows the Slurm cluster. This is the port the
usage listing reads them through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

MAX_ALLOCATIONS = 1000
"""The most allocations asked about at once: one page of usage rows."""


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
