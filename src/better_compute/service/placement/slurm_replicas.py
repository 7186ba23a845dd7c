"""The Slurm job of a workload replica as the `SlurmControl` port submits it
(docs/slurm.md#replicas-as-jobs).

What the job runs and asks for is the domain's (`domain.placement.slurm_replicas.replica_job`); this
adds where it goes in the cluster: its partition and where its output is kept.
"""

from __future__ import annotations

from better_compute.domain.placement.slurm_replicas import ReplicaJob
from better_compute.service.fleet.slurm import JobRequest


def replica_job_request(
    job: ReplicaJob, *, partition: str | None = None, output: str = "/dev/null"
) -> JobRequest:
    """The batch job of `job`: named after its allocation, on its node, with its GRES and time limit."""
    return JobRequest(
        name=job.name,
        command=job.command,
        gres_name=job.gres_name,
        gres_type=job.gres_type,
        gres_count=job.gres_count,
        partition=partition,
        output=output,
        nodelist=job.node,
        time_limit_minutes=job.time_limit_minutes,
    )
