"""Workload replicas as Slurm jobs (issue 40 item 4; docs/slurm.md#replicas-as-jobs): the phase a
replica is in, read from its job's state and reason, and the job that runs a replica.

A replica placed in a Slurm cluster is one job holding the replica's GRES. Slurm picks the cards; the
job's state says where the replica stands. `replica_phase` reads every state squeue(1) lists under JOB
STATE CODES:

- waiting (`PENDING`, `CONFIGURING`, `REQUEUED`, `REQUEUE_FED`): `admitted`, Slurm will start it when
  it can (`Resources`, `Priority`, `BeginTime`, `Dependency`...); but `pending` when Slurm's reason
  says it will not start until a person or a limit changes (held, an invalid account or QOS, a
  partition down, an association or QOS limit, a node not available: `BLOCKED_REASONS`), as a
  deployment is `pending` while quota or capacity blocks it; `REQUEUE_HOLD` and `RESV_DEL_HOLD` are
  held, so `pending`;
- holding its GRES (`RUNNING`, `SIGNALING`, `RESIZING`): `running` once the replica is ready, `placed`
  until then (`ready` False: the container is created and not ready yet); `ready` None (no readiness
  known: no container) counts the job's running as the replica's;
- `SUSPENDED`, `STOPPED`: `placed` (holds its GRES, runs nothing);
- `COMPLETING`, `STAGE_OUT`: `stopping` (still holds its GRES while Slurm ends it);
- `COMPLETED`: `succeeded` (a service's replica that exits is to be submitted again, as any end);
- every other end (`FAILED`, `TIMEOUT`, `NODE_FAIL`, `OUT_OF_MEMORY`, `PREEMPTED`, `BOOT_FAIL`,
  `DEADLINE`, `CANCELLED`, `REVOKED`, `SPECIAL_EXIT`): `failed`.

The message keeps Slurm's own words: `Slurm job 42 PENDING (Resources)`.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from better_compute.domain.fleet.slurm import JOB_STATES
from better_compute.domain.kernel.containers import ContainerSpec
from better_compute.domain.placement.workloads import Phase

ReplicaPhase = Literal["pending", "admitted", "placed", "running", "stopping", "succeeded", "failed"]
REPLICA_PHASES: tuple[ReplicaPhase, ...] = get_args(ReplicaPhase)

BLOCKED_REASONS = frozenset(
    {
        "AccountNotAllowed",
        "AssociationJobLimit",
        "AssociationResourceLimit",
        "AssociationTimeLimit",
        "BadConstraints",
        "DependencyNeverSatisfied",
        "FrontEndDown",
        "InvalidAccount",
        "InvalidQOS",
        "JobHeldAdmin",
        "JobHeldUser",
        "JobLaunchFailure",
        "NodeDown",
        "PartitionDown",
        "PartitionInactive",
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "QOSJobLimit",
        "QOSResourceLimit",
        "QOSTimeLimit",
        "QOSUsageThreshold",
        "ReqNodeNotAvail",
        "SystemFailure",
    }
)
"""squeue(1)'s JOB REASON CODES after which a pending job waits for a person or a limit, not for
Slurm's queue; every `AssocGrp*`, `AssocMax*`, `QOSGrp*` and `QOSMax*` limit too (`_LIMIT`)."""

_LIMIT = re.compile(r"^(AssocGrp|AssocMax|QOSGrp|QOSMax|MaxCpuPerAccount|MaxGRES|MaxMemPer)")

_WAITING = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED"})
_HELD = frozenset({"REQUEUE_HOLD", "RESV_DEL_HOLD"})
_HOLDING = frozenset({"RUNNING", "SIGNALING", "RESIZING"})
_PAUSED = frozenset({"SUSPENDED", "STOPPED"})
_ENDING = frozenset({"COMPLETING", "STAGE_OUT"})


@dataclass(frozen=True, slots=True)
class SlurmReplicaPhase:
    """A replica's phase from its job: `holds` while the job holds its GRES (our atoms are bound to
    it), `finished` once it holds nothing and runs no more."""

    phase: ReplicaPhase
    message: str
    holds: bool
    finished: bool


def blocked(reason: str) -> bool:
    """Whether a pending job's reason says it waits for a person or a limit, not for the queue."""
    first = reason.split(",", 1)[0].strip()
    return first in BLOCKED_REASONS or bool(_LIMIT.match(first))


def replica_phase(job_id: int, state: str, reason: str, *, ready: bool | None = None) -> SlurmReplicaPhase:
    """The phase of the replica job `job_id` is in `state` with Slurm's `reason` (`None` when it has
    none); `ready`: what the node says of the replica's container (None: nothing to be ready)."""
    if state not in JOB_STATES:
        raise ValueError(f"unknown Slurm job state {state!r}")
    said = f"Slurm job {job_id} {state}" + (f" ({reason})" if reason and reason != "None" else "")
    if state in _WAITING:
        return SlurmReplicaPhase("pending" if blocked(reason) else "admitted", said, False, False)
    if state in _HELD:
        return SlurmReplicaPhase("pending", said, False, False)
    if state in _HOLDING:
        phase: ReplicaPhase = "placed" if ready is False else "running"
        return SlurmReplicaPhase(phase, said, True, False)
    if state in _PAUSED:
        return SlurmReplicaPhase("placed", said, True, False)
    if state in _ENDING:
        return SlurmReplicaPhase("stopping", said, True, False)
    if state == "COMPLETED":
        return SlurmReplicaPhase("succeeded", said, False, True)
    return SlurmReplicaPhase("failed", said, False, True)


# -- the job of a replica -------------------------------------------------------------------------

CDI_KIND = "better-compute.io/gpu"
"""The CDI kind `bcd` writes an allocation's device under (wire.cdi.KIND; a test holds them equal)."""


def cdi_spec_file(allocation_id: str) -> str:
    """The allocation's CDI spec file name as `bcd` writes it (wire.cdi.spec_file_name)."""
    return f"{CDI_KIND.replace('/', '-')}_{allocation_id}.json"


MAX_TIME_LIMIT_MINUTES = 366 * 24 * 60
"""The longest `--time` given: a year. A replica without one runs to the partition's limit."""


@dataclass(frozen=True, slots=True)
class ReplicaJob:
    """What the job of one replica asks Slurm for and runs: its name (the allocation id, so a job
    outliving a server restart is recognised), GRES, node, time limit and command."""

    name: str
    command: str
    gres_name: str
    gres_type: str | None
    gres_count: int
    node: str | None
    time_limit_minutes: int | None


JOB_LABEL = "better-compute.slurm-allocation"
"""The label a replica job's container carries, its value the allocation id: how `bcd` on the node
finds the container the job runs, to report its readiness (bcd.containers.JOB_LABEL; a test holds
them equal). Not `bcd`'s own node label, so `bcd` never takes it for one of its own to remove."""

PROBE_ADDRESS = "127.0.0.1"
"""Where a replica job's container publishes its httpGet probe's port (a random host port): the
node's loopback, where `bcd` on the same host probes it; nothing else is published."""


def podman_run(allocation_id: str, container: ContainerSpec, *, podman: str = "podman") -> list[str]:
    """The `podman run` line of a replica's container on its allocation's CDI device (`bcd` writes the
    allocation's CDI spec once Slurm's chosen GRES are bound to atoms). Removed when it exits, named
    after the allocation and labelled with it (`JOB_LABEL`, so `bcd` finds it and reports its
    readiness), an httpGet probe's port published on the node's loopback for `bcd` to probe, with its
    resources, environment and entrypoint as `bcd` gives them."""
    argv = [
        podman,
        "run",
        "--rm",
        "--name",
        f"bc-slurm-{allocation_id}",
        "--label",
        f"{JOB_LABEL}={allocation_id}",
        "--device",
        f"{CDI_KIND}={allocation_id}",
    ]
    probe = container.readiness
    if probe is not None and probe.http_port is not None:
        argv += ["--publish", f"{PROBE_ADDRESS}::{probe.http_port}"]
    if container.cpu is not None:
        argv += ["--cpus", f"{container.cpu:g}"]
    if container.memory_mib is not None:
        argv += ["--memory", f"{container.memory_mib}m"]
    for name, value in sorted(container.env.items()):
        argv += ["--env", f"{name}={value}"]
    if container.command:
        argv += ["--entrypoint", json.dumps(list(container.command))]
    return [*argv, container.image, *container.args]


def container_command(
    allocation_id: str,
    container: ContainerSpec,
    *,
    cdi_root: str = "/var/run/cdi",
    cdi_wait_seconds: int = 300,
) -> str:
    """The shell line a replica's job runs for its container: wait up to `cdi_wait_seconds` for the
    allocation's CDI spec in `cdi_root` (bcd's `--cdi-root`; written once the job's GRES are bound
    to atoms), then `podman run` it in the job's place (`exec`, so cancelling the job stops it)."""
    spec = f"{cdi_root.rstrip('/')}/{cdi_spec_file(allocation_id)}"
    return (
        f"for _ in $(seq {cdi_wait_seconds}); do [ -e {shlex.quote(spec)} ] && break; sleep 1; done; "
        f"exec {shlex.join(podman_run(allocation_id, container))}"
    )


def replica_job(
    allocation_id: str,
    *,
    gres_type: str | None,
    gres_count: int,
    container: ContainerSpec | None = None,
    command: Sequence[str] = (),
    node: str | None = None,
    time_limit_minutes: int | None = None,
    gres_name: str = "gpu",
    cdi_root: str = "/var/run/cdi",
    cdi_wait_seconds: int = 300,
) -> ReplicaJob:
    """The job of the replica `allocation_id`: its container's `podman run`, first waiting up to
    `cdi_wait_seconds` for the allocation's CDI spec in `cdi_root` (bcd's `--cdi-root`), since the
    atoms are bound, and the spec written, only once the job runs; or `command` when it has no
    container."""
    if (container is None) == (not command):
        raise ValueError("a replica job runs either a container or a command")
    if time_limit_minutes is not None and not 1 <= time_limit_minutes <= MAX_TIME_LIMIT_MINUTES:
        raise ValueError(f"time limit {time_limit_minutes} minutes: 1 to {MAX_TIME_LIMIT_MINUTES}")
    if container is not None:
        text = container_command(
            allocation_id, container, cdi_root=cdi_root, cdi_wait_seconds=cdi_wait_seconds
        )
    else:
        text = shlex.join(command)
    return ReplicaJob(
        name=allocation_id,
        command=text,
        gres_name=gres_name,
        gres_type=gres_type,
        gres_count=gres_count,
        node=node,
        time_limit_minutes=time_limit_minutes,
    )


# -- a deployment's phase from its replicas' jobs -------------------------------------------------

SHOWN_AS: dict[ReplicaPhase, Phase] = {
    "pending": "pending",
    "admitted": "admitted",
    "placed": "placed",
    "running": "running",
    "stopping": "placed",
    "succeeded": "admitted",
    "failed": "admitted",
}
"""The deployment phase (`domain.placement.workloads.Phase`) each replica phase counts as. A job
`stopping` still holds its GRES and runs nothing of use: `placed`. A job that ended (`succeeded` or
`failed`) is followed by a new one for the same replica (the follower submits it again, as a node
starts an exited container again): the replica waits for Slurm to start it, `admitted`; the
deployment's message keeps the ended job's state and Slurm's reason."""


def deployment_phase(desired: int, replicas: Sequence[SlurmReplicaPhase | None]) -> tuple[Phase, str]:
    """A Slurm deployment's phase and message from its booked replicas' jobs (None: no job submitted
    yet, `admitted`): `running` once one replica runs, `placed` once every desired replica holds its
    GRES, `pending` while one waits for a person or a limit, else `admitted`. The message is the
    first replica's not running, in Slurm's words (`Slurm job 42 PENDING (Resources)`), else ''."""
    shown = [SHOWN_AS[r.phase] if r is not None else "admitted" for r in replicas]
    waiting = next((r.message for r in replicas if r is not None and r.phase != "running"), "")
    if "running" in shown:
        return "running", waiting
    if shown and len(shown) >= desired and all(p == "placed" for p in shown):
        return "placed", waiting
    if "pending" in shown:
        return "pending", waiting
    return "admitted", waiting
