"""Workloads across clusters, their deployments, placement previews and operations (docs/placement.md).

Requests take the API's camelCase and the seed's snake_case names (`device_class`, `cluster_floors`,
`requires_single_topology_domain`, ...), and `project` for `tenantId`; answers are camelCase.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AliasChoices, Field

from better_compute.wire.common import PageCursor, PageLimit, WireAnswer, WireRequest
from better_compute.wire.containers import Container, ContainerPublic

MAX_REPLICAS = 10_000
MAX_DEVICE_COUNT = 64
MAX_LIST = 64
MAX_MEMORY_GIB = 100_000
MAX_COMPUTE_SLICES = 1_000
"""Limits of the server's `domain.placement.workloads` and `domain.placement.capability` (a test keeps them
equal)."""

Strategy = Literal["pack", "spread"]
DomainKind = Literal["nvlink", "pcie", "numa"]
Phase = Literal["pending", "admitted", "placed", "running"]
Reason = Literal[
    "insufficient_quota",
    "insufficient_capacity",
    "topology_constraint_not_met",
    "policy_denied",
    "cost_ceiling_exceeded",
    "preempted",
]

_TENANT = AliasChoices("tenantId", "tenant_id", "project")


def _alias(camel: str, snake: str) -> Any:
    return AliasChoices(camel, snake)


class AtLeastPublic(WireAnswer):
    min: float


class AtLeast(AtLeastPublic, WireRequest):
    min: float = Field(json_schema_extra={"exclusiveMinimum": 0, "maximum": MAX_MEMORY_GIB})


class AtLeastSlicesPublic(WireAnswer):
    min: int


class AtLeastSlices(AtLeastSlicesPublic, WireRequest):
    min: int = Field(json_schema_extra={"minimum": 1, "maximum": MAX_COMPUTE_SLICES})


class CapabilityPublic(WireAnswer):
    """What each device must give at least, instead of a named class (docs/scheduling.md)."""

    memory_gib: AtLeastPublic | None = Field(
        default=None,
        alias="memoryGiB",
        validation_alias=_alias("memoryGiB", "memory_gib"),
        exclude_if=lambda v: v is None,
    )
    compute_slices: AtLeastSlicesPublic | None = Field(
        default=None,
        validation_alias=_alias("computeSlices", "compute_slices"),
        exclude_if=lambda v: v is None,
    )
    nvlink_peer: bool | None = Field(
        default=None, validation_alias=_alias("nvlinkPeer", "nvlink_peer"), exclude_if=lambda v: v is None
    )


class Capability(CapabilityPublic, WireRequest):
    memory_gib: AtLeast | None = Field(
        default=None,
        alias="memoryGiB",
        validation_alias=_alias("memoryGiB", "memory_gib"),
        exclude_if=lambda v: v is None,
    )
    compute_slices: AtLeastSlices | None = Field(
        default=None,
        validation_alias=_alias("computeSlices", "compute_slices"),
        exclude_if=lambda v: v is None,
    )


class ShapePublic(WireAnswer):
    """What one replica needs: `deviceCount` devices of `deviceClass`. A shape asked by
    `capability` shows the implicit class it resolved to (`capability/...`) and the capability."""

    device_class: str = Field(validation_alias=_alias("deviceClass", "device_class"))
    device_count: int = Field(default=1, validation_alias=_alias("deviceCount", "device_count"))
    capability: CapabilityPublic | None = Field(default=None, exclude_if=lambda v: v is None)
    container: ContainerPublic | None = Field(default=None, exclude_if=lambda v: v is None)
    """What each replica runs (docs/placement.md#what-runs); absent: nothing is started for it."""


class Shape(ShapePublic, WireRequest):
    """`deviceClass`, or `capability` (what each device must give: the cheapest kind of device
    that gives it is chosen), and `deviceCount`."""

    device_class: str | None = Field(  # type: ignore[assignment]
        default=None, validation_alias=_alias("deviceClass", "device_class")
    )
    device_count: int = Field(
        default=1,
        validation_alias=_alias("deviceCount", "device_count"),
        json_schema_extra={"minimum": 1, "maximum": MAX_DEVICE_COUNT},
    )
    capability: Capability | None = None
    container: Container | None = None


class RefusedOfferPublic(WireAnswer):
    """A kind of device cheaper than the one chosen (or any, when none was), and why it was not."""

    device_class: str
    kind: str
    price_per_hour: str | None
    reason: str


class ResolutionPublic(WireAnswer):
    """What a capability request resolved to: the implicit device class of the cheapest kind of
    device that gives it (null: none the project may use does), what it gives and costs, and why
    each cheaper kind was refused."""

    device_class: str | None
    kind: str | None
    memory_gib: float | None = Field(alias="memoryGiB")
    compute_slices: int | None
    """Null for a whole GPU: all of its compute."""
    price_per_hour: str | None
    """Per device, in the prices' currency (its share of a GPU times its meter's price)."""
    currency: str | None
    free_devices: int | None
    refused: list[RefusedOfferPublic]


class _Placing(WireRequest):
    """The fields placement reads, shared by `workloads.create` and `placement.preview`."""

    tenant_id: str | None = Field(default=None, validation_alias=_TENANT)
    shape: Shape | None = None
    replicas: int = Field(default=1, json_schema_extra={"minimum": 0, "maximum": MAX_REPLICAS})
    strategy: Strategy = "pack"
    cluster_floors: dict[str, int] | None = Field(
        default=None, validation_alias=_alias("clusterFloors", "cluster_floors")
    )
    max_clusters: int | None = Field(default=None, validation_alias=_alias("maxClusters", "max_clusters"))
    cluster: str | None = None
    requires_single_topology_domain: bool = Field(
        default=False,
        validation_alias=_alias("requiresSingleTopologyDomain", "requires_single_topology_domain"),
    )
    topology_domain_kind: DomainKind | None = Field(
        default=None, validation_alias=_alias("topologyDomainKind", "topology_domain_kind")
    )
    priority_class: str | None = Field(
        default=None, validation_alias=_alias("priorityClass", "priority_class")
    )
    """Whom the workload may evict to be placed, and who may evict it
    (docs/scheduling.md#who-may-be-evicted)."""
    allowed_regions: list[str] | None = Field(
        default=None, validation_alias=_alias("allowedRegions", "allowed_regions"), max_length=MAX_LIST
    )
    allowed_clusters: list[str] | None = Field(
        default=None, validation_alias=_alias("allowedClusters", "allowed_clusters"), max_length=MAX_LIST
    )
    """Where the workload may go: `workloads.create` makes them the policy `<name>-placement`;
    `placement.preview` plans with that policy as create would."""


class WorkloadCreate(_Placing):
    """`workloads.create`: `{name, project, shape: {deviceClass, deviceCount}, replicas, strategy:
    pack|spread, clusterFloors?, maxClusters?, priorityClass?, cluster? (pins the workload there),
    allowedRegions?, allowedClusters?, requiresSingleTopologyDomain?, topologyDomainKind?}`. Giving
    `allowedRegions` or `allowedClusters` creates the policy `<name>-placement` on the workload."""

    name: str = Field(json_schema_extra={"maxLength": 63})
    shape: Shape


class WorkloadScale(WireRequest):
    """`workloads.scale`: the new number of replicas; `generation` makes it a compare-and-swap.
    `id` is the path's (the method table sends it in the body too); the server goes by the path."""

    id: str | None = None
    replicas: int = Field(json_schema_extra={"minimum": 0, "maximum": MAX_REPLICAS})
    generation: int | None = None


class PlacementPreviewRequest(_Placing):
    """`placement.preview`: a workload's id (`workloadId`), or `{project, shape, replicas}` with the
    other placement fields of `workloads.create` (`allowedRegions` and `allowedClusters` included,
    checked and applied as create applies them)."""

    workload_id: str | None = Field(default=None, validation_alias=_alias("workloadId", "workload_id"))


class VerdictPublic(WireAnswer):
    """One cluster's verdict: admitted or why not, and the figures that decided."""

    cluster_id: str
    admitted: bool
    reason: Reason | None
    message: str
    free_devices: int
    """Free, healthy devices of the class the project may use there (cordoned nodes left out)."""
    quota_left: int | None
    """Devices of the class the project's quota still allows there (null: no quota row limits it)."""
    largest_domain: int
    """The most free devices in one topology domain (one node without a topology requirement)."""
    room: int
    """New replicas the cluster could take now."""
    share: int
    shortfall: int
    cost_per_hour: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """What the workload's replicas would cost per hour there, all of them (a decimal in the
    prices' currency): shown where a policy's cost ceiling applies and the price is known."""


class PreemptionPublic(WireAnswer):
    """A replica of another workload evicted (or, in a preview, to be evicted) so that this one's
    replicas fit, and the rule that allowed it."""

    cluster_id: str
    workload_id: str
    """The evicted replica's workload, or the reservation's id for a reservation."""
    allocation_id: str
    priority_class: str
    why: Literal["priority", "floor", "fair_share"]
    kind: Literal["replica", "reservation"] = "replica"
    """A workload's replica, or a reservation made with `preemptible: true` (ended early)."""


ReplicaProblem = Literal["crash-looping", "image-not-found", "create-failed"]


class ReplicaProblemPublic(WireAnswer):
    """A replica whose container does not run, as its node reported it."""

    allocation_id: str
    node: str
    problem: ReplicaProblem
    detail: str | None = None
    restarts: int = 0
    exit_code: int | None = None


class DeploymentPublic(WireAnswer):
    """A workload's share in one cluster and where it got to."""

    id: str
    workload_id: str
    tenant_id: str
    cluster_id: str
    desired_replicas: int
    placed_replicas: int
    """Replicas whose devices are booked."""
    running_replicas: int
    """Replicas running: bound on their node, or for a workload with a container, ready (as
    `readyReplicas`)."""
    ready_replicas: int = 0
    """Replicas whose container its node reports ready (0 for a workload without a container)."""
    problems: list[ReplicaProblemPublic] = Field(default_factory=list)
    """Replicas whose container does not run, and why (at most 20)."""
    terminating_replicas: int = 0
    """Replicas taken away whose node has not released them yet: their devices stay allocated."""
    phase: Phase
    reason: Reason | None
    message: str
    shortfall: int
    """Replicas of its share it could not take (quota or capacity)."""
    preempted_by: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """With reason `preempted`: the workload whose placement evicted its replicas."""
    created_at: datetime
    updated_at: datetime


class WorkloadPublic(WireAnswer):
    id: str
    name: str
    tenant_id: str
    shape: ShapePublic
    replicas: int
    strategy: Strategy
    cluster_floors: dict[str, int]
    max_clusters: int | None
    priority_class: str
    cluster: str | None
    requires_single_topology_domain: bool
    topology_domain_kind: DomainKind | None
    allowed_regions: list[str]
    allowed_clusters: list[str]
    drained_clusters: list[str]
    """Clusters a `workload.drain` took it out of: placement leaves them out."""
    policy_id: str | None
    placed_replicas: int
    ready_replicas: int = 0
    """Replicas ready, over every cluster (a workload with a container)."""
    unplaced_replicas: int
    terminating_replicas: int = 0
    """Replicas taken away (in any cluster) whose node has not released them yet."""
    reason: Reason | None
    generation: int
    created_at: datetime
    deployments: list[DeploymentPublic]
    verdicts: list[VerdictPublic] | None = Field(default=None, exclude_if=lambda v: v is None)
    """A verdict per cluster, in the answers of create, scale and drain."""
    resolution: ResolutionPublic | None = Field(default=None, exclude_if=lambda v: v is None)
    """In the answer of a create by capability: what it resolved to, and why cheaper kinds were not."""
    preemptions: list[PreemptionPublic] | None = Field(default=None, exclude_if=lambda v: not v)
    """Replicas of other workloads this placement evicted, in the answers of create, scale and
    drain (left out when none)."""


class PlacementPreview(WireAnswer):
    """What placement would choose now: the clusters and shares, a verdict per cluster, and the
    replicas no cluster could take. Nothing was written."""

    clusters: list[str]
    shares: dict[str, int]
    verdicts: list[VerdictPublic]
    unplaced_replicas: int
    reason: Reason | None
    preemptions: list[PreemptionPublic] = Field(default_factory=list)
    """Replicas of other workloads the placement would evict (none: empty)."""
    resolution: ResolutionPublic | None = Field(default=None, exclude_if=lambda v: v is None)
    """For a shape asked by capability: what it resolved to, and why cheaper kinds were not."""


class WorkloadListQuery(WireRequest):
    tenant_id: str | None = Field(default=None, validation_alias=_TENANT)
    limit: PageLimit = None
    cursor: PageCursor = None


class DeploymentListQuery(WireRequest):
    workload_id: str | None = Field(default=None, validation_alias=_alias("workloadId", "workload_id"))
    limit: PageLimit = None
    cursor: PageCursor = None


class OperationCreate(WireRequest):
    """`operations.create`: `{type: 'workload.drain', workloadId, payload: {cluster}}` moves a
    workload out of a cluster; `{type: 'replica.release', payload: {allocation}}` (admin) ends a
    terminating replica whose node will not release it.

    A drain that would leave replicas with nowhere to go (no other cluster can take them now) is
    refused (`INVALID_STATE`, `nowhere_to_go`) unless `force` is true. `dryRun` answers what the
    drain would do (`status: planned`) and changes nothing."""

    type: Literal["workload.drain", "replica.release"]
    workload_id: str | None = Field(
        default=None, validation_alias=AliasChoices("workloadId", "workload_id", "workload")
    )
    payload: dict[str, str]
    dry_run: bool = False
    """A drain only: answer what it would do (`status: planned`, no id) and change nothing."""
    force: bool = False
    """A drain only: drain even when replicas would have nowhere to go (they end, and wait as
    unplaced)."""


class OperationPublic(WireAnswer):
    id: str
    type: str
    status: Literal["running", "succeeded", "failed", "planned"]
    """`planned`: the answer of a dry run: what the operation would do; nothing was recorded, so
    its `id` is empty and there is nothing to read back."""
    workload_id: str | None
    payload: dict[str, Any]
    result: dict[str, Any]
    created_at: datetime
    finished_at: datetime | None
