"""A Slurm controller in memory: `SlurmControl` for unit tests, after Slurm 22.05's documented behaviour.

What it follows (sbatch(1), scontrol(1), scancel(1), squeue(1) "JOB REASON CODES", slurm.conf(5)
`MinJobAge`, and how select/cons_tres hands out GRES):

- A submitted job is `PENDING`. Until its `--begin` its reason is `BeginTime`; once eligible and
  before a scheduling pass has looked at it, `None`; when the pass finds too few free GRES of its
  type on the nodes it may use, `Resources`.
- A scheduling pass (`advance`, `schedule`) starts eligible jobs in priority order (earlier
  submitted first) and gives each the lowest free GRES indices of its type on its node: a node's
  `gpu` GRES are numbered in gres.conf order, and a job asking `gpu:<type>:N` gets N of that type
  (an untyped `gpu:N`, any type).
- A `RUNNING` job holds its indices until it ends: `COMPLETED` when told (`complete`),
  `CANCELLED` by `cancel`, `TIMEOUT` once its time limit has passed.
- `scancel` of a job that ended or that slurmctld does not know is silent; `scontrol show job` of
  one it does not know raises `SlurmJobUnknown`. An ended job is forgotten `min_job_age` seconds
  (300 by default) after it ended.
- A reservation holding GRES is refused as 22.05 refuses it; a whole-node reservation keeps jobs
  that do not name it off its nodes.

The contract test (tests/slurm/test_slurm_contract.py) runs the same assertions against this and
against a real Slurm, so the two cannot drift apart unseen.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from better_compute.domain.fleet.slurm import (
    FINISHED_STATES,
    GresAllocation,
    SlurmJob,
    SlurmReservation,
    check_name,
)
from better_compute.service.fleet.slurm import (
    HoldRequest,
    JobRequest,
    SlurmJobUnknown,
    SlurmRefused,
    SlurmUnreachable,
)

MIN_JOB_AGE = 300
"""slurm.conf(5) `MinJobAge`'s default: seconds an ended job stays known to slurmctld."""


@dataclass
class _Job:
    job_id: int
    name: str
    account: str
    partition: str
    node: str | None
    gres: tuple[tuple[str | None, int], ...]
    """(type, count) pairs of `gpu` asked for; a None type takes any."""
    eligible_at: float
    time_limit_seconds: int | None
    reservation: str | None
    state: str = "PENDING"
    reason: str = "None"
    indices: tuple[int, ...] = ()
    started_at: float | None = None
    ended_at: float | None = None
    on_node: str = ""
    command: str = ""
    """What the job runs (`sbatch --wrap`'s command; slurmctld keeps it in the batch script)."""


@dataclass
class FakeSlurm:
    """One Slurm cluster: `nodes` maps each node to the types of its `gpu` GRES in index order."""

    nodes: Mapping[str, Sequence[str]]
    partition: str = "ours"
    default_account: str = "root"
    min_job_age: int = MIN_JOB_AGE
    now: float = 0.0
    """Seconds on the fake's own clock; `advance` moves it."""
    calls: list[str] = field(default_factory=list)
    """What was asked, in order (`submit`, `cancel <id>`, ...), for tests that count round trips."""
    unreachable: bool = False
    """Answer every call with `SlurmUnreachable`, as a controller that does not answer."""
    _jobs: dict[int, _Job] = field(default_factory=dict)
    _reservations: dict[str, SlurmReservation] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # -- the port ------------------------------------------------------------------------------
    def submit(self, request: JobRequest) -> int:
        self._call("submit")
        check_name("job", request.name)
        if request.partition and request.partition != self.partition:
            raise SlurmRefused("sbatch: error: invalid partition specified")
        if request.reservation and request.reservation not in self._reservations:
            raise SlurmRefused("sbatch: error: Invalid reservation name specified")
        return self._add(
            name=request.name,
            account=self.default_account,
            node=None,
            gres=((request.gres_type, request.gres_count),),
            begin_seconds=0,
            time_limit_seconds=None,
            reservation=request.reservation,
            command=request.command,
        )

    def submit_hold(self, request: HoldRequest) -> int:
        self._call("submit_hold")
        check_name("job", request.name)
        if request.partition != self.partition:
            raise SlurmRefused("sbatch: error: invalid partition specified")
        if request.node not in self.nodes:
            raise SlurmRefused("sbatch: error: invalid node name specified")
        return self._add(
            name=request.name,
            account=request.account,
            node=request.node,
            gres=tuple((kind, count) for kind, count in request.gres),
            begin_seconds=request.begin_seconds,
            time_limit_seconds=request.time_limit_seconds,
            reservation=None,
            command=request.command,
        )

    def job(self, job_id: int) -> SlurmJob:
        self._call(f"job {job_id}")
        self._forget()
        found = self._jobs.get(job_id)
        if found is None:
            raise SlurmJobUnknown("slurm_load_jobs error: Invalid job id specified")
        return self._shown(found)

    def jobs(self, partitions: Sequence[str] | None = None) -> list[SlurmJob]:
        self._call("jobs")
        self._forget()
        return [
            self._shown(j) for j in self._jobs.values() if partitions is None or j.partition in partitions
        ]

    def cancel(self, job_id: int) -> None:
        self._call(f"cancel {job_id}")
        found = self._jobs.get(job_id)
        if found is None or found.state in FINISHED_STATES:
            return
        self._end(found, "CANCELLED")

    def create_reservation(
        self, name: str, *, nodes: str, users: str, duration_minutes: int, tres: Mapping[str, int] | None
    ) -> SlurmReservation:
        self._call("create_reservation")
        if tres and any(key.startswith("gres/") for key in tres):
            first = next(key for key in tres if key.startswith("gres/"))
            raise SlurmRefused(
                f"Error creating the reservation: TRES type '{first}' not supported with reservations"
            )
        if name in self._reservations:
            raise SlurmRefused("Error creating the reservation: Reservation request overlaps")
        kept = SlurmReservation(name=name, nodes=nodes, tres=f"node={len(nodes.split(','))}", users=users)
        self._reservations[name] = kept
        return kept

    def delete_reservation(self, name: str) -> None:
        self._call("delete_reservation")
        if any(j.reservation == name and j.state == "RUNNING" for j in self._jobs.values()):
            raise SlurmRefused("Error deleting the reservation: Reservation busy")
        if self._reservations.pop(name, None) is None:
            raise SlurmRefused("Error deleting the reservation: Invalid reservation name specified")

    def reconfigure(self) -> None:
        self._call("reconfigure")

    # -- what a test does to the cluster --------------------------------------------------------
    def advance(self, seconds: float = 1.0) -> None:
        """Let `seconds` pass: jobs past their time limit end `TIMEOUT`, then a scheduling pass."""
        self.now += seconds
        for job in self._jobs.values():
            if (
                job.state == "RUNNING"
                and job.time_limit_seconds is not None
                and job.started_at is not None
                and self.now >= job.started_at + job.time_limit_seconds
            ):
                self._end(job, "TIMEOUT")
        self.schedule()

    def schedule(self) -> None:
        """One scheduling pass: eligible pending jobs start, earliest submitted first, on the lowest
        free indices of their type; those that do not fit wait for `Resources`."""
        for job in sorted(self._jobs.values(), key=lambda j: j.job_id):
            if job.state != "PENDING":
                continue
            if job.eligible_at > self.now:
                job.reason = "BeginTime"
                continue
            placed = self._place(job)
            if placed is None:
                job.reason = "Resources"
                continue
            job.on_node, job.indices = placed
            job.state, job.reason, job.started_at = "RUNNING", "None", self.now

    def script(self, job_id: int) -> str:
        """The command the job runs (`scontrol write batch_script <id> -` prints it, in the script
        `sbatch --wrap` made of it)."""
        return self._jobs[job_id].command

    def fail(self, job_id: int) -> None:
        """The job's command exited non-zero."""
        self._end(self._jobs[job_id], "FAILED")

    def complete(self, job_id: int) -> None:
        """The job's command exited 0."""
        self._end(self._jobs[job_id], "COMPLETED")

    # -- inside ----------------------------------------------------------------------------------
    def _call(self, what: str) -> None:
        if self.unreachable:
            raise SlurmUnreachable(f"{what}: slurmctld did not answer")
        self.calls.append(what)

    def _add(
        self,
        *,
        name: str,
        account: str,
        node: str | None,
        gres: tuple[tuple[str | None, int], ...],
        begin_seconds: int,
        time_limit_seconds: int | None,
        reservation: str | None,
        command: str = "",
    ) -> int:
        if not gres or any(count < 1 for _, count in gres):
            raise SlurmRefused("sbatch: error: Invalid generic resource (gres) specification")
        candidates = [node] if node is not None else list(self.nodes)
        if not any(self._fits(n, gres, set()) is not None for n in candidates):
            raise SlurmRefused(
                "sbatch: error: Batch job submission failed: Requested node configuration is not available"
            )
        job_id = next(self._ids)
        minutes = None if time_limit_seconds is None else -(-max(1, time_limit_seconds) // 60)
        self._jobs[job_id] = _Job(
            job_id=job_id,
            name=name,
            account=account,
            partition=self.partition,
            node=node,
            gres=gres,
            eligible_at=self.now + max(0, begin_seconds),
            time_limit_seconds=None if minutes is None else minutes * 60,
            reservation=reservation,
            reason="BeginTime" if begin_seconds > 0 else "None",
            command=command,
        )
        return job_id

    def _held(self, node: str) -> set[int]:
        return {
            i for j in self._jobs.values() if j.state == "RUNNING" and j.on_node == node for i in j.indices
        }

    def _reserved(self, node: str) -> set[str]:
        return {r.name for r in self._reservations.values() if node in r.nodes.split(",")}

    def _place(self, job: _Job) -> tuple[str, tuple[int, ...]] | None:
        for node in [job.node] if job.node is not None else sorted(self.nodes):
            reserved = self._reserved(node)
            if reserved and job.reservation not in reserved:
                continue
            fits = self._fits(node, job.gres, self._held(node))
            if fits is not None:
                return node, fits
        return None

    def _fits(
        self, node: str, gres: tuple[tuple[str | None, int], ...], held: set[int]
    ) -> tuple[int, ...] | None:
        """The lowest free indices of each asked type on `node`, or None when some type is short."""
        taken = set(held)
        chosen: list[int] = []
        for kind, count in gres:
            free = [
                i for i, t in enumerate(self.nodes[node]) if i not in taken and (kind is None or t == kind)
            ]
            if len(free) < count:
                return None
            chosen += free[:count]
            taken.update(free[:count])
        return tuple(chosen)

    def _end(self, job: _Job, state: str) -> None:
        job.state, job.ended_at = state, self.now
        if state == "CANCELLED" and job.started_at is None:
            job.indices = ()

    def _forget(self) -> None:
        for job_id in [
            j.job_id
            for j in self._jobs.values()
            if j.ended_at is not None and self.now - j.ended_at >= self.min_job_age
        ]:
            del self._jobs[job_id]

    def _shown(self, job: _Job) -> SlurmJob:
        gres: list[GresAllocation] = []
        if job.state == "RUNNING":
            by_type: dict[str, list[int]] = {}
            for index in job.indices:
                by_type.setdefault(self.nodes[job.on_node][index], []).append(index)
            gres = [
                GresAllocation(job.on_node, "gpu", kind, len(indices), tuple(indices))
                for kind, indices in by_type.items()
            ]
        return SlurmJob(
            job_id=job.job_id,
            state=job.state,
            reason=job.reason,
            nodes=job.on_node if job.state == "RUNNING" else "",
            gres=tuple(gres),
            name=job.name,
            account=job.account,
            partition=job.partition,
            time_limit_minutes=None if job.time_limit_seconds is None else job.time_limit_seconds // 60,
            required_nodes=job.node or "",
        )
