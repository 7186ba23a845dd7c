"""Placement's events: device and priority classes, workloads and their deployments, preemptions.

Each is a frozen dataclass on `domain.kernel.events.Event`; `domain.ops.event_types` registers
every context's types, for reading the log back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from better_compute.domain.kernel.events import Event, payload_key


@dataclass(frozen=True, slots=True)
class DeviceClassCreated(Event):
    """A device class was created (`subject`: its name); `selector` as `selectors.document` spells it."""

    TYPE: ClassVar[str] = "device_class.created"
    cls: str = payload_key("class")
    selector: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PriorityClassCreated(Event):
    """A priority class was created (`subject`: its name)."""

    TYPE: ClassVar[str] = "priority_class.created"
    priority: int
    preemptible: bool


@dataclass(frozen=True, slots=True)
class WorkloadCreated(Event):
    """A workload was created (`subject`: its id)."""

    TYPE: ClassVar[str] = "workload.created"
    tenant_id: str
    name: str
    device_class: str
    device_count: int
    replicas: int
    priority_class: str | None = None
    """Its priority class, so that a replay of the log asks for the same (None in events logged
    before it was recorded: `standard`)."""


@dataclass(frozen=True, slots=True)
class WorkloadScaled(Event):
    """A workload was asked for a new number of replicas (`subject`: its id)."""

    TYPE: ClassVar[str] = "workload.scaled"
    tenant_id: str
    replicas: int
    previous: int


@dataclass(frozen=True, slots=True)
class ReservationPreempted(Event):
    """A reservation made with `preemptible: true` was ended early so that a workload's replicas
    could be placed (`subject`: the reservation; docs/scheduling.md#who-may-be-evicted): `preemptor_id` is the
    workload, `why` the rule (`priority`, `floor` or `fair_share`). Its `reservation.released`
    comes with it."""

    TYPE: ClassVar[str] = "reservation.preempted"
    tenant_id: str
    preemptor_id: str
    why: str


@dataclass(frozen=True, slots=True)
class WorkloadDecided(Event):
    """Placement decided where a workload's replicas go (`subject`: its id): on its create, scale
    and drain, and on a retry that changed something. `trigger` says which; `shares` are the
    replicas booked per cluster after it, `unplaced` (with `reason`) those no cluster took,
    `refused` the clusters that took none (cluster -> reason, at most `MAX_REFUSED`), and
    `evicted` the replicas of other workloads it preempted (clusterId, workloadId, allocationId,
    why). `better-compute workloads why` reads these."""

    TYPE: ClassVar[str] = "workload.decided"
    tenant_id: str
    trigger: str
    replicas: int
    shares: Mapping[str, int]
    unplaced: int
    reason: str | None = None
    refused: Mapping[str, str] = field(default_factory=dict)
    evicted: tuple[Mapping[str, str], ...] = ()
    evictions: int = 0
    """How many replicas it preempted in all (`evicted` names at most `MAX_REFUSED`)."""


@dataclass(frozen=True, slots=True)
class WorkloadDrained(Event):
    """A workload was drained from a cluster (`subject`: its id; `workload.drain`): its deployment
    there removed and placement leaving the cluster out from then on; `force` when the drain was
    sent with `force: true` (it may have stranded replicas). Logged with the drain's own
    `workload.decided`, so that a replay of the log drains the same cluster at the same instant."""

    TYPE: ClassVar[str] = "workload.drained"
    tenant_id: str
    cluster_id: str
    force: bool = False


MAX_REFUSED = 20
"""Clusters a `workload.decided` names as refused, and evictions it names: enough to say why,
bounded on a large fleet."""


@dataclass(frozen=True, slots=True)
class WorkloadDeleted(Event):
    """A workload was deleted and its replicas' devices released (`subject`: its id)."""

    TYPE: ClassVar[str] = "workload.deleted"
    tenant_id: str
    name: str


@dataclass(frozen=True, slots=True)
class DeploymentUpdated(Event):
    """A deployment's share, replicas or phase changed (`subject`: its id); `phase` `removed` when
    its cluster holds none of the workload's replicas any more."""

    TYPE: ClassVar[str] = "deployment.updated"
    tenant_id: str
    workload_id: str
    cluster_id: str
    phase: str
    desired_replicas: int
    booked_replicas: int
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ReplicasTerminating(Event):
    """Replicas taken away from a workload in a cluster while their node had them handed over
    (`subject`: the workload): their devices stay booked until the node releases each allocation."""

    TYPE: ClassVar[str] = "workload.replicas.terminating"
    tenant_id: str
    cluster_id: str
    allocations: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WorkloadPreempted(Event):
    """Replicas of a workload were evicted so that another workload's could be placed (`subject`:
    the evicted workload; docs/scheduling.md#preemption-by-priority). `preemptor_id` is the workload placed,
    `why` the rule that let it (`priority`, `floor` or `fair_share`); the deployment goes back to `pending`
    and its replicas are placed again when they can be."""

    TYPE: ClassVar[str] = "workload.preempted"
    tenant_id: str
    cluster_id: str
    deployment_id: str
    allocations: tuple[str, ...]
    preemptor_id: str
    why: str
