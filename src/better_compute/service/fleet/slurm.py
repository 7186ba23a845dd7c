"""The port to a Slurm cluster: what the control plane asks of Slurm, whatever carries the asking.

The Slurm commands carry it today (`better_compute.slurm.commands`); Slurm's REST API may later. A
use case holds a `SlurmControl` and never sees a command line. docs/slurm.md#talking-to-slurm.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from better_compute.domain.fleet.slurm import SlurmAccountingRecord, SlurmJob, SlurmNode, SlurmReservation


class SlurmUnreachable(Exception):
    """Slurm did not answer in time, or its command is missing: nothing is known to have changed."""


class SlurmRefused(Exception):
    """Slurm answered and said no (unknown job, a request it does not support): its message is kept."""


class SlurmJobUnknown(SlurmRefused):
    """slurmctld does not know the job: never submitted, or ended longer ago than its `MinJobAge`
    (300 s by default), after which only accounting (`sacct`) still has it."""


@dataclass(frozen=True)
class JobRequest:
    """One batch job: a command to run with the GRES it needs, in a partition, maybe in a reservation."""

    name: str
    command: str
    gres_name: str
    gres_type: str | None
    gres_count: int
    partition: str | None = None
    reservation: str | None = None
    output: str = "/dev/null"
    """Where the job's stdout and stderr go, a path on the node (sbatch's --output)."""
    nodelist: str | None = None
    """The node the job must run on (sbatch's --nodelist): a replica placed on one node."""
    time_limit_minutes: int | None = None
    """sbatch's --time; None: the partition's default."""


@dataclass(frozen=True)
class HoldRequest:
    """A holding job (ADR 0015): the `gres` it holds on one `node`, as (type, count) pairs of `gpu`
    GRES, from `begin_seconds` after it is submitted, for `time_limit_seconds` (None: the
    partition's limit), under `account`, named `name` (it carries the allocation id), running
    `command` (one that waits)."""

    name: str
    account: str
    partition: str
    node: str
    gres: tuple[tuple[str, int], ...]
    begin_seconds: int
    time_limit_seconds: int | None
    command: str = "sleep infinity"
    output: str = "/dev/null"


class SlurmControl(Protocol):
    """What the control plane asks of one Slurm cluster."""

    def submit(self, request: JobRequest) -> int:
        """Submit a batch job; its Slurm job id."""
        ...

    def job(self, job_id: int) -> SlurmJob:
        """The job's state and the GRES indices Slurm chose for it (none while it is pending); raises
        `SlurmJobUnknown` for a job slurmctld no longer (or never) knew."""
        ...

    def cancel(self, job_id: int) -> None:
        """Cancel the job; cancelling one that already ended, or an unknown id, is not an error."""
        ...

    def create_reservation(
        self, name: str, *, nodes: str, users: str, duration_minutes: int, tres: Mapping[str, int] | None
    ) -> SlurmReservation:
        """Reserve from now: the whole `nodes`, or only `tres` on them; the reservation as Slurm kept it."""
        ...

    def delete_reservation(self, name: str) -> None:
        """Delete the reservation."""
        ...

    def reconfigure(self) -> None:
        """Have slurmctld and every slurmd read their configuration again (`scontrol reconfigure`)."""
        ...

    def accounting(
        self, start: datetime, end: datetime, *, accounts: Sequence[str] = ()
    ) -> tuple[SlurmAccountingRecord, ...]:
        """The job allocations slurmdbd recorded as pending or running in `[start, end)` (of
        `accounts` only, when given): their account, GRES held, start, end and state (`sacct -X`).
        GPU-seconds in the period are `held(start, end, now) * gres("gpu")` each."""
        ...

    def node(self, name: str) -> SlurmNode:
        """The node as slurmctld has it: its state, reason and configured `Gres`
        (`scontrol -o show node`)."""
        ...

    def drain(self, node: str, reason: str) -> None:
        """Take no new jobs on the node, leaving those that run (`scontrol update nodename=<node>
        state=drain reason=<reason>`)."""
        ...

    def resume(self, node: str) -> None:
        """Give the node back to the scheduler after a drain (`state=resume`)."""
        ...

    def jobs_on(self, node: str) -> tuple[SlurmJob, ...]:
        """The jobs that hold something on the node now (running, completing, suspended), with their
        GRES indices (`squeue` then `scontrol -o show job -d`)."""

    def submit_hold(self, request: HoldRequest) -> int:
        """Submit a holding job (`sbatch --nodelist --begin=now+<s> --time --account --gres`); its id."""
        ...

    def jobs(self, partitions: Sequence[str] | None = None) -> list[SlurmJob]:
        """Every job slurmctld knows (pending, running, and ended less than its `MinJobAge` ago), of
        `partitions` only when given, with the GRES indices each running one holds."""
        ...
