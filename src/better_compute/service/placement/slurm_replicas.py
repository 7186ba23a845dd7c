"""The Slurm job of a workload replica as the `SlurmControl` port submits it
(docs/slurm.md#replicas-as-jobs).

What the job runs and asks for is the domain's (`domain.placement.slurm_replicas.replica_job`); this
adds where it goes in the cluster: its partition and where its output is kept. `ReplicaCommands`
tells the Slurm follower what a replica's job runs: the follower submits it in place of a holding
job, so the job that holds the replica's GRES is the one that runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from better_compute.domain.placement.slurm_replicas import ReplicaJob, container_command
from better_compute.domain.placement.workloads import is_replica
from better_compute.service.fleet.slurm import JobRequest
from better_compute.service.kernel.ports import StorePort
from better_compute.service.placement.ports import PlacementTx


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


HOLD_COMMAND = "sleep infinity"
"""What the job of a replica without a container runs: it holds the GRES for the holder, who starts
its own work on the devices, as a reservation's holding job does."""


class ReplicaCommands:
    """What each workload replica on a Slurm node runs as its job (the follower's `JobCommands`): its
    container's `podman run` on the allocation's CDI device, once `bcd` has written it; a replica of
    a workload without a container holds (`HOLD_COMMAND`). Every replica is named, so the follower
    follows an ended job of any replica with a new one rather than ending the replica."""

    def __init__(self, store: StorePort[PlacementTx], *, cdi_root: str = "/var/run/cdi") -> None:
        self.store = store
        self.cdi_root = cdi_root

    def commands(self, allocation_ids: Sequence[str]) -> Mapping[str, str]:
        replicas = [a for a in allocation_ids if is_replica(a)]
        if not replicas:
            return {}
        with self.store.read() as tx:
            containers = tx.workloads.containers_of(replicas)
        return {
            a: HOLD_COMMAND
            if a not in containers
            else container_command(a, containers[a], cdi_root=self.cdi_root)
            for a in replicas
        }
