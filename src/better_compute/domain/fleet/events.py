"""Fleet's events: pools, clusters, nodes, their inventory, scrubs and bindings.

Each is a frozen dataclass on `domain.kernel.events.Event`; `domain.ops.event_types` registers
every context's types, for reading the log back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from better_compute.domain.kernel.events import Event


@dataclass(frozen=True, slots=True)
class PoolCreated(Event):
    TYPE: ClassVar[str] = "pool.created"
    mode: str
    policy: Mapping[str, Any]
    nodes: tuple[str, ...]
    owner_tenant_id: str


@dataclass(frozen=True, slots=True)
class PoolDeleted(Event):
    TYPE: ClassVar[str] = "pool.deleted"
    generation: int


@dataclass(frozen=True, slots=True)
class PoolUpdated(Event):
    TYPE: ClassVar[str] = "pool.updated"
    generation: int
    policy: Mapping[str, Any]
    added: tuple[str, ...]
    removed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClusterCreated(Event):
    """A cluster was created through the API (`subject`: the cluster), of `kind` `local` or `slurm`
    (domain.fleet.cluster_kinds); a fleet file's clusters log none."""

    TYPE: ClassVar[str] = "cluster.created"
    kind: str
    region: str


@dataclass(frozen=True, slots=True)
class ClusterUpdated(Event):
    """A cluster's phase was set (`subject`: the cluster): `active`, `cordoned` or `draining`
    (domain.fleet.clusters); `previous` is the phase it had."""

    TYPE: ClassVar[str] = "cluster.updated"
    phase: str
    previous: str


@dataclass(frozen=True, slots=True)
class NodeCordoned(Event):
    """A node was cordoned (`subject`: the node): its atoms take no new booking; those booked stay."""

    TYPE: ClassVar[str] = "node.cordoned"


@dataclass(frozen=True, slots=True)
class NodeUncordoned(Event):
    """A node's cordon was lifted (`subject`: the node): its atoms take new bookings again."""

    TYPE: ClassVar[str] = "node.uncordoned"


@dataclass(frozen=True, slots=True)
class NodeInventoryChanged(Event):
    """A node's GPUs or atoms changed: how many rows of each were written."""

    TYPE: ClassVar[str] = "node.inventory.changed"
    gpus: int
    atoms: int


@dataclass(frozen=True, slots=True)
class NodeJoined(Event):
    """A node registered its signing key with a join token (`subject`: the node); `replaced` when it
    had one before, which no longer verifies anything."""

    TYPE: ClassVar[str] = "node.joined"
    replaced: bool


@dataclass(frozen=True, slots=True)
class NodeReportRefused(Event):
    """A request signed as coming from a node was refused (`subject`: the node it claimed to be):
    `reason` is the rule it broke (`signature`, `stale`, `replayed`, `other_node`, ...)."""

    TYPE: ClassVar[str] = "node.report.refused"
    reason: str
    kind: str | None = None
    owners: Mapping[str, str] = field(default_factory=dict)
    """`GpuOwnedElsewhere`: each uuid the inventory named that another node holds, and that node."""


@dataclass(frozen=True, slots=True)
class GpuReleased(Event):
    """An admin released a GPU from its node (`subject`: the GPU's uuid; `nodes.releaseGpu`): it is
    not present there any more, and the next node that reports it takes it (domain.fleet.gpu_owners)."""

    TYPE: ClassVar[str] = "gpu.released"
    node: str
    by: str | None = None
    """The credential that released it."""


@dataclass(frozen=True, slots=True)
class NodeScrubbed(Event):
    """A node reported it scrubbed these atoms (`subject`: the node)."""

    TYPE: ClassVar[str] = "node.scrubbed"
    atoms: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeRebootRequired(Event):
    """A node's inventory newly says GPUs wait for a reboot: a MIG mode change needed a GPU reset
    that failed (`subject`: the node)."""

    TYPE: ClassVar[str] = "node.reboot_required"
    gpus: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeLayoutRefused(Event):
    """A node's inventory newly says it could not bring a GPU to its layout (`subject`: the node):
    the hardware, or a GPU client that would not stop, refused `action` on `gpu`, for `reason`."""

    TYPE: ClassVar[str] = "node.layout_refused"
    gpu: str
    action: str
    reason: str


@dataclass(frozen=True, slots=True)
class AllocationBound(Event):
    """A node reported where it got handing an allocation's atoms over (`subject`: the allocation,
    a reservation's id): `binding` is `bound`, `device-missing` or `refused`."""

    TYPE: ClassVar[str] = "allocation.bound"
    node: str
    binding: str
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class AllocationReleased(Event):
    """A node reported it took an allocation's devices back (`subject`: the allocation)."""

    TYPE: ClassVar[str] = "allocation.released"
    node: str


@dataclass(frozen=True, slots=True)
class ReplicaReadinessChanged(Event):
    """A node's word on a container it runs went to `ready` or from it (`subject`: the allocation, a
    workload replica's `<deploymentId>.r<n>` or an endpoint copy's `copy:<component>:<index>`;
    `state`: the one it reported now). Written with the report, in its transaction: an endpoint's
    live relayout that waits for moved copies to be ready resumes on it
    (`service.endpoints.relayout_resume`), and readers of the log see a replica come and go."""

    TYPE: ClassVar[str] = "replica.readiness_changed"
    node: str
    ready: bool
    state: str


@dataclass(frozen=True, slots=True)
class ReplicaExec(Event):
    """A command is sent to run in a replica's or a copy's container through its node's agent
    (`workloads exec`, `endpoints exec`; `subject`: the allocation). For audit: who ran it (`by`, the
    credential), its tenant's replica (`tenantId`), on which node, the command's first argument only
    (`command`; its other arguments may hold secrets). Written in its own transaction before the node
    is asked, so that every command sent is logged even when the server stops mid-exec (how it ended
    is a `ReplicaExecFinished`'s, once the node answered). Never its output."""

    TYPE: ClassVar[str] = "replica.exec"
    node: str
    tenant_id: str | None
    by: str
    command: str


@dataclass(frozen=True, slots=True)
class ReplicaExecFinished(Event):
    """The node answered a `ReplicaExec` (`subject`: the same allocation): the command's exit code
    and whether it ran past its timeout (`timed_out`; exit code 124, the command may still run in the
    container). Best effort, after the command ran: an exec with none was not answered (the node did
    not answer, ran no container for it, or the server stopped), so it may have run."""

    TYPE: ClassVar[str] = "replica.exec_finished"
    node: str
    tenant_id: str | None
    by: str
    command: str
    exit_code: int
    timed_out: bool
