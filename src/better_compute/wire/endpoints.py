"""Inference endpoints on MIG partitions (docs/endpoints.md; the seed's field names, camelCase): an endpoint's
variants each take `instanceCount` nodes of a mig pool and split every accelerator by one partition
layout. Limits: 10 variants, 64 instances a variant, 7 partition types a layout, names of 1-63
letters, digits or inner hyphens (the server's `domain.endpoints.endpoints`)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from better_compute.wire.common import PageCursor, PageLimit, WireAnswer, WireRequest
from better_compute.wire.containers import Container, ContainerPublic

MAX_NAME = 63
MAX_VARIANTS = 10
MAX_INSTANCES = 64
MAX_PARTITION_TYPES = 7
STATUSES = ("Creating", "InService", "Updating", "Failed", "Deleting")


class PartitionLayoutPublic(WireAnswer):
    """One accelerator's split: one `mig-<profile>` entry per MIG instance (`mig-3g.40gb`)."""

    accelerator_partition_types: list[str]


class PartitionLayout(PartitionLayoutPublic, WireRequest):
    accelerator_partition_types: list[str] = Field(min_length=1, max_length=MAX_PARTITION_TYPES)


class VariantPublic(WireAnswer):
    name: str
    pool_id: str
    instance_count: int
    accelerator_partition_layouts: list[PartitionLayoutPublic]
    price_per_instance_hour: str | None = Field(default=None, exclude_if=lambda v: v is None)


class Variant(VariantPublic, WireRequest):
    """A production variant: `instanceCount` nodes of the mig pool `poolId`, every accelerator split
    by the one entry of `acceleratorPartitionLayouts` (it is not positional), and an optional
    `pricePerInstanceHour` (a decimal number, for showback and the cost per unit)."""

    name: str = Field(json_schema_extra={"maxLength": MAX_NAME})
    instance_count: int = Field(json_schema_extra={"minimum": 1, "maximum": MAX_INSTANCES})
    accelerator_partition_layouts: list[PartitionLayout] = Field(min_length=1, max_length=1)  # type: ignore[assignment]
    price_per_instance_hour: str | float | None = None  # type: ignore[assignment]


class EndpointCreate(WireRequest):
    """`endpoints.create`: `{name, tenantId?, variants: [...]}`. Without `tenantId` the endpoint is
    the token's tenant's (an admin names one). Takes idle nodes of each variant's pool (the pool's
    owner or the admin may) and cuts them to the layout through the layout gate."""

    name: str = Field(json_schema_extra={"maxLength": MAX_NAME})
    tenant_id: str | None = None
    variants: list[Variant] = Field(min_length=1, max_length=MAX_VARIANTS)


class VariantRelayout(WireRequest):
    """A variant's new layout: `{name, acceleratorPartitionLayouts: [{acceleratorPartitionTypes}]}`."""

    name: str = Field(json_schema_extra={"maxLength": MAX_NAME})
    accelerator_partition_layouts: list[PartitionLayout] = Field(min_length=1, max_length=1)


class EndpointUpdate(WireRequest):
    """`endpoints.update`: new partition layouts for some of the endpoint's variants, rolled live
    instance by instance through the layout gate (`Updating`, then `InService`). Only layouts
    change; `name` is the path's."""

    name: str | None = None
    variants: list[VariantRelayout] = Field(min_length=1, max_length=MAX_VARIANTS)


class InstancePublic(WireAnswer):
    """A node an endpoint took: `Creating` while its GPUs are cut (`Updating` while a relayout re-cuts
    it), `InService` after; `partitions` counts the MIG instances of each type its GPUs have now."""

    node: str
    variant: str
    layout: str
    state: str
    gpus: int
    partitions: dict[str, int]


class NodeReturnPublic(WireAnswer):
    """A node of an endpoint being deleted: the layout it has (`layoutFrom`) and its pool's, which
    it is cut back to through the layout gate (`layoutTo`; null for a node in no pool)."""

    node: str
    pool_id: str | None
    layout_from: str
    layout_to: str | None


class EndpointDeletionPublic(WireAnswer):
    """What `endpoints.delete` did, or with `dryRun` would do: the components removed with the
    endpoint and each node's way back to its pool's layout."""

    components: list[str]
    nodes: list[NodeReturnPublic]


class EndpointPublic(WireAnswer):
    """An endpoint: `status` is Creating, InService, Updating (a live relayout; `reason` when a step
    waits), Failed (with `reason`) or Deleting."""

    name: str
    tenant_id: str
    status: str
    reason: str | None = None
    variants: list[VariantPublic]
    instances: list[InstancePublic]
    created_at: datetime
    updated_at: datetime
    dry_run: bool = Field(default=False, exclude_if=lambda v: not v)
    """True in the answer of a dry run (`endpoints.delete` with `dryRun`): nothing was changed."""
    deletion: EndpointDeletionPublic | None = Field(default=None, exclude_if=lambda v: v is None)
    """In the answer of `endpoints.delete`: what the delete did (or, in a dry run, would do)."""


class EndpointDelete(WireRequest):
    """`endpoints.delete`: `dryRun` (a query parameter, as every field of a DELETE beyond its path)
    runs the delete's checks and steps and rolls them back, answering what it would do (200)."""

    name: str = Field(min_length=1)
    dry_run: bool = False


class EndpointListQuery(WireRequest):
    """`endpoints.list` (query parameters): by name; `tenantId` narrows the admin's list."""

    tenant_id: str | None = None
    limit: PageLimit = None
    cursor: PageCursor = None


class NameRequest(WireRequest):
    """The body of methods that name one endpoint: `endpoints.get|delete`."""

    name: str = Field(min_length=1)


MAX_COPIES = 1_000
MAX_INVOKE_PATH = 1024
MAX_CPU_CORES = 1_024
MAX_MEMORY_MIB = 16 * 1024 * 1024


class ComponentCreate(WireRequest):
    """`components.create`: one model on one partition type of an endpoint's variant, `copies` of
    it (0-1,000; default 1), each on a free partition of that type; `devicesRequired` is 1 (one
    partition); `cpuCores` (default 1, at most 1,024) and `memoryMiB` (default 1024, at most 16 TiB)
    are each copy's host resources; `minCopies` (default `copies - 1`, at least 1) is the floor a
    live relayout keeps."""

    name: str = Field(json_schema_extra={"maxLength": MAX_NAME})
    endpoint_name: str = Field(json_schema_extra={"maxLength": MAX_NAME})
    variant_name: str = Field(json_schema_extra={"maxLength": MAX_NAME})
    model: str = Field(json_schema_extra={"maxLength": 256})
    partition_type: str = Field(json_schema_extra={"maxLength": 64})
    devices_required: int = 1
    cpu_cores: float | str | None = None
    memory_mib: int | None = Field(default=None, alias="memoryMiB")
    copies: int | None = Field(default=None, json_schema_extra={"minimum": 0, "maximum": MAX_COPIES})
    min_copies: int | None = None
    container: Container | None = None
    """The model server each copy runs (docs/endpoints.md#what-runs): SageMaker's container
    contract fills in port 8080, readiness `GET /ping` on the first port, and `cpuCores` and
    `memoryMiB` as its resources, where left out."""
    invoke_path: str | None = Field(default=None, json_schema_extra={"maxLength": MAX_INVOKE_PATH})
    """Where invocations are POSTed on the container's first port (default `/invocations`)."""


class ComponentScale(WireRequest):
    """`components.scale`: the new number of copies (and `minCopies`). `partitionType`, when given,
    must be the component's own: a component's partition type is fixed for its life."""

    name: str | None = None
    copies: int = Field(json_schema_extra={"minimum": 0, "maximum": MAX_COPIES})
    min_copies: int | None = None
    partition_type: str | None = Field(default=None, json_schema_extra={"maxLength": 64})


class CopyPublic(WireAnswer):
    """One copy (`index`): `placed` on a partition (`node`, `gpuId`, `partition` type, `atomId`, and
    `migUuid` once the node reported it: what a serving gateway routes to), or `pending`."""

    index: int
    state: str
    node: str | None = None
    gpu_id: str | None = None
    partition: str | None = None
    atom_id: str | None = None
    mig_uuid: str | None = None
    runtime_state: Literal["created", "ready", "not-ready", "exited", "removed"] | None = None
    """What the node it is on last said of its container (a component with a container); null:
    nothing yet, or no container."""


class ComponentPublic(WireAnswer):
    """A component: `copyCount` copies asked for, `placedCopies` on a partition, `pendingCopies`
    waiting (`reason` says why), and `copies`, each copy where it runs: the routing table."""

    name: str
    endpoint_name: str
    variant_name: str
    tenant_id: str
    model: str
    partition_type: str
    devices_required: int
    cpu_cores: str
    memory_mib: int = Field(alias="memoryMiB")
    copy_count: int
    min_copies: int
    container: ContainerPublic | None = Field(default=None, exclude_if=lambda v: v is None)
    """The model server each copy runs, SageMaker's defaults filled in; absent: none is started."""
    invoke_path: str = "/invocations"
    placed_copies: int
    ready_copies: int = 0
    """Copies whose container the node they are on reports ready; for a component without a
    container, the placed copies (nothing is started for them)."""
    pending_copies: int
    reason: str | None = None
    copies: list[CopyPublic]
    created_at: datetime
    updated_at: datetime


class ComponentListQuery(WireRequest):
    """`components.list` (query parameters): by name; `endpointName` narrows to one endpoint."""

    endpoint_name: str | None = None
    limit: PageLimit = None
    cursor: PageCursor = None
