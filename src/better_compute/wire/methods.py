"""The method table: every API method by name, and how it travels over HTTP.

This table is the single source of truth for the HTTP shape of the API. The typed client, the CLI's
`api` command and the documentation read it; the server's routes implement it.

How a call `(name, body)` becomes an HTTP request (`Method.render`):

- `{param}` segments of the path are filled from the body's field of the same (camelCase) name.
- GET: the remaining fields become query parameters (lists repeat the parameter, `None` is left out,
  booleans are `true`/`false`); there is no body.
- Other verbs: the whole body, path parameters included, is sent as JSON. The server takes the path
  parameter as authoritative and validates the body with the method's request model.

Responses are the method's response model as JSON; a method marked `paged` answers `Page[response]`
(`{"items": [...], "nextCursor": ...}`). Every refusal is an `ErrorBody` (`{"error": {...}}`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast
from urllib.parse import quote

from better_compute.wire.billing import (
    BillPublic,
    BillQuery,
    PriceListQuery,
    PricePublic,
    PriceSet,
    UsageListQuery,
    UsageReportPublic,
    UsageReportQuery,
    UsageRowPublic,
)
from better_compute.wire.capacity import (
    CapacityAccounting,
    CapacityAccountingQuery,
    CapacityByPool,
    CapacityByPoolQuery,
    CapacityFree,
    CapacityFreeQuery,
    CapacitySummary,
    CapacitySummaryQuery,
    CapacityTimeline,
    CapacityTimelineQuery,
)
from better_compute.wire.common import Page, WireRequest
from better_compute.wire.container_exec import EndpointExecRequest, ExecPublic, WorkloadExecRequest
from better_compute.wire.device_classes import DeviceClassCreate, DeviceClassListQuery, DeviceClassPublic
from better_compute.wire.doctor import DoctorQuery, DoctorReport
from better_compute.wire.endpoints import (
    ComponentCreate,
    ComponentListQuery,
    ComponentPublic,
    ComponentScale,
    EndpointCreate,
    EndpointDelete,
    EndpointListQuery,
    EndpointPublic,
    EndpointUpdate,
    NameRequest,
)
from better_compute.wire.events import EventListQuery, EventPublic
from better_compute.wire.inventory import (
    AtomListQuery,
    ClusterCreate,
    ClusterListQuery,
    ClusterPublic,
    ClusterUpdate,
    GpuListQuery,
    GpuPublic,
    GpuRelease,
    NodeListQuery,
    NodePublic,
    NodeUpdate,
)
from better_compute.wire.logs import EndpointLogsRequest, LogsPublic, WorkloadLogsRequest
from better_compute.wire.node_detail import NodeDetailPublic, NodeGet
from better_compute.wire.nodes import (
    JoinTokenCreate,
    JoinTokenIssued,
    NodeJoin,
    NodeJoined,
    NodeReportSend,
    NodeSpecPublic,
    NodeSpecQuery,
    ReportAccepted,
)
from better_compute.wire.partitions import (
    PartitionBook,
    PartitionBookingPublic,
    PartitionRelease,
    PartitionReleasedPublic,
)
from better_compute.wire.policies import PolicyCreate, PolicyListQuery, PolicyPublic, PolicyUpdate
from better_compute.wire.pools import (
    PoolCreate,
    PoolLayoutPreview,
    PoolLayoutPreviewRequest,
    PoolListQuery,
    PoolOffer,
    PoolOfferPublic,
    PoolPublic,
    PoolUpdate,
)
from better_compute.wire.priority_classes import (
    PriorityClassCreate,
    PriorityClassListQuery,
    PriorityClassPublic,
)
from better_compute.wire.quotas import QuotaListQuery, QuotaPublic, QuotaSet
from better_compute.wire.replay import ReplayReport, ReplayRun
from better_compute.wire.reservations import (
    IdRequest,
    ReservationCreate,
    ReservationExtend,
    ReservationListQuery,
    ReservationPublic,
)
from better_compute.wire.slurm_gres import NodeSlurmGresGet, NodeSlurmGresPublic
from better_compute.wire.tenants import (
    CredentialCreate,
    CredentialCreated,
    CredentialListQuery,
    CredentialPublic,
    TenantCreate,
    TenantListQuery,
    TenantPublic,
    TenantUpdate,
    WhoAmI,
    WhoAmIQuery,
)
from better_compute.wire.workloads import (
    DeploymentListQuery,
    DeploymentPublic,
    OperationCreate,
    OperationPublic,
    PlacementPreview,
    PlacementPreviewRequest,
    WorkloadCreate,
    WorkloadListQuery,
    WorkloadPublic,
    WorkloadScale,
)

Verb = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]

_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

Inventory = dict[str, Any]
"""Inventory reads (clusters, nodes, GPUs, atoms) answer JSON objects here; their typed answer models
and their query models live with the inventory's wire module."""


@dataclass(frozen=True)
class HttpCall:
    """One API call rendered for HTTP: verb, path with parameters filled in, query and JSON body."""

    verb: Verb
    path: str
    query: list[tuple[str, str]]
    json: dict[str, Any] | None


@dataclass(frozen=True)
class Method:
    """One API method: its HTTP verb and path template, request and response models.

    `response` is the model of one answer, or of one item when `paged`. `idempotency_key` marks a POST
    that accepts `idempotencyKey`: clients generate one when the caller gave none, so that a retried
    call never acts twice. `writes_nothing` marks a POST that only reads (it carries a body), which
    a client may resend as freely as a GET.
    """

    name: str
    verb: Verb
    path: str
    request: type[WireRequest] | None
    response: Any
    paged: bool = False
    idempotency_key: bool = False
    summary: str = ""
    writes_nothing: bool = False

    @property
    def path_params(self) -> tuple[str, ...]:
        return tuple(_PARAM.findall(self.path))

    @property
    def response_type(self) -> Any:
        """The type of the whole answer: `Page[response]` for paged methods, else `response`."""
        return cast(Any, Page)[self.response] if self.paged else self.response

    def retry_safe(self, body: Mapping[str, Any]) -> bool:
        """Whether sending this call twice acts at most once: GET, PUT, DELETE, a POST that writes
        nothing, or a keyed POST."""
        if self.verb in ("GET", "PUT", "DELETE") or self.writes_nothing:
            return True
        return self.idempotency_key and bool(body.get("idempotencyKey"))

    def render(self, body: Mapping[str, Any]) -> HttpCall:
        """Turn a call's JSON body into an HTTP request; a missing path parameter is a ValueError."""
        path = self.path
        for param in self.path_params:
            value = body.get(param)
            if value is None or value == "":
                raise ValueError(f"{self.name} needs {param!r}")
            path = path.replace("{" + param + "}", quote(str(value), safe=""))
        if self.verb in ("GET", "DELETE"):  # a DELETE has no body: what it says is in its query
            query: list[tuple[str, str]] = []
            for key, value in body.items():
                if key in self.path_params or value is None:
                    continue
                values = value if isinstance(value, list | tuple) else [value]
                query.extend((key, _query_value(item)) for item in values if item is not None)
            return HttpCall(self.verb, path, query, None)
        return HttpCall(self.verb, path, [], dict(body))


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


_TABLE: tuple[Method, ...] = (
    Method("tenants.create", "POST", "/v1/tenants", TenantCreate, TenantPublic, summary="Create a tenant."),
    Method("tenants.list", "GET", "/v1/tenants", TenantListQuery, TenantPublic, paged=True),
    Method(
        "tenants.delete",
        "DELETE",
        "/v1/tenants/{id}",
        IdRequest,
        TenantPublic,
        summary="Delete a tenant that owns no pool and holds no reservation; its credentials stop working.",
    ),
    Method(
        "tenants.update",
        "PATCH",
        "/v1/tenants/{id}",
        TenantUpdate,
        TenantPublic,
        summary="Change a tenant's display name (admin); its id never changes.",
    ),
    Method(
        "credentials.create",
        "POST",
        "/v1/credentials",
        CredentialCreate,
        CredentialCreated,
        summary="Create a bearer credential; its token is shown once.",
    ),
    Method(
        "credentials.list",
        "GET",
        "/v1/credentials",
        CredentialListQuery,
        CredentialPublic,
        paged=True,
        summary="Credentials without their tokens; a tenant sees its own.",
    ),
    Method(
        "credentials.revoke",
        "POST",
        "/v1/credentials/{id}/revoke",
        IdRequest,
        CredentialPublic,
        summary="Revoke a credential: its token stops working at once. Revoking twice is harmless.",
    ),
    Method(
        "credentials.whoami",
        "GET",
        "/v1/whoami",
        WhoAmIQuery,
        WhoAmI,
        summary="Who the token is: its credential and the tenant it acts for.",
    ),
    Method("pools.create", "POST", "/v1/pools", PoolCreate, PoolPublic, summary="Create a pool."),
    Method("pools.list", "GET", "/v1/pools", PoolListQuery, PoolPublic, paged=True),
    Method("pools.get", "GET", "/v1/pools/{id}", IdRequest, PoolPublic),
    Method(
        "pools.update",
        "PATCH",
        "/v1/pools/{id}",
        PoolUpdate,
        PoolPublic,
        summary="Change a pool's policy or nodes; a new migLayout goes through the layout gate.",
    ),
    Method(
        "pools.delete",
        "DELETE",
        "/v1/pools/{id}",
        IdRequest,
        PoolPublic,
        summary="Delete an empty pool (no nodes, no reservations) with its quota rows and policies.",
    ),
    Method(
        "pools.offer",
        "POST",
        "/v1/pools/{poolId}/offers",
        PoolOffer,
        PoolOfferPublic,
        summary="Give another tenant quota in a pool.",
    ),
    Method(
        "pools.previewLayout",
        "POST",
        "/v1/pools/{id}/preview-layout",
        PoolLayoutPreviewRequest,
        PoolLayoutPreview,
        summary="What a new migLayout would do, node by node: when it could be granted, who holds it "
        "back, the atoms that go and come, capacity before and after. Writes nothing.",
        writes_nothing=True,
    ),
    Method("quotas.set", "PUT", "/v1/quotas", QuotaSet, QuotaPublic, summary="Set one quota row."),
    Method("quotas.list", "GET", "/v1/quotas", QuotaListQuery, QuotaPublic, paged=True),
    Method(
        "policies.create",
        "POST",
        "/v1/policies",
        PolicyCreate,
        PolicyPublic,
        summary="Create a policy: per-reservation limits, placement constraints or both, on a subject.",
    ),
    Method("policies.list", "GET", "/v1/policies", PolicyListQuery, PolicyPublic, paged=True),
    Method("policies.get", "GET", "/v1/policies/{id}", IdRequest, PolicyPublic),
    Method(
        "policies.update",
        "PATCH",
        "/v1/policies/{id}",
        PolicyUpdate,
        PolicyPublic,
        summary="Replace a policy's limits and/or placement constraints; its name and subject are fixed.",
    ),
    Method(
        "policies.delete",
        "DELETE",
        "/v1/policies/{id}",
        IdRequest,
        PolicyPublic,
        summary="Delete a policy; reservations it admitted stand.",
    ),
    Method(
        "deviceClasses.create",
        "POST",
        "/v1/device-classes",
        DeviceClassCreate,
        DeviceClassPublic,
        summary="Create a device class (admin): an atom class and a selector over atom attributes, by name.",
    ),
    Method(
        "deviceClasses.list",
        "GET",
        "/v1/device-classes",
        DeviceClassListQuery,
        DeviceClassPublic,
        paged=True,
        summary="Device classes by name (any token).",
    ),
    Method("deviceClasses.get", "GET", "/v1/device-classes/{id}", IdRequest, DeviceClassPublic),
    Method(
        "priorityClasses.create",
        "POST",
        "/v1/priority-classes",
        PriorityClassCreate,
        PriorityClassPublic,
        summary="Create a priority class (admin): a priority for workloads, higher wins; preemptible ones"
        " may be evicted for higher ones.",
    ),
    Method(
        "priorityClasses.list",
        "GET",
        "/v1/priority-classes",
        PriorityClassListQuery,
        PriorityClassPublic,
        paged=True,
        summary="Priority classes by name, `standard` among them (any token).",
    ),
    Method("priorityClasses.get", "GET", "/v1/priority-classes/{id}", IdRequest, PriorityClassPublic),
    Method(
        "endpoints.create",
        "POST",
        "/v1/endpoints",
        EndpointCreate,
        EndpointPublic,
        summary="Create an inference endpoint: each variant takes idle nodes of a mig pool and cuts every"
        " GPU to its partition layout through the layout gate (`Creating`, then `InService`).",
    ),
    Method(
        "endpoints.list",
        "GET",
        "/v1/endpoints",
        EndpointListQuery,
        EndpointPublic,
        paged=True,
        summary="Endpoints by name: the token's tenant's, or (admin) every tenant's or the one named.",
    ),
    Method("endpoints.get", "GET", "/v1/endpoints/{name}", NameRequest, EndpointPublic),
    Method(
        "endpoints.logs",
        "GET",
        "/v1/endpoints/{name}/logs",
        EndpointLogsRequest,
        LogsPublic,
        summary="The newest lines of a component copy's container log, read through its node's agent"
        " (`tail` 1 to 10,000, default 100; at most 1 MiB).",
    ),
    Method(
        "endpoints.exec",
        "POST",
        "/v1/endpoints/{name}/exec",
        EndpointExecRequest,
        ExecPublic,
        summary="Run a command (argv, no TTY, no stdin) in a component copy's container through its node's"
        " agent: its exit code, stdout and stderr (1 MiB each; 1 to 60 s, default 10). Logged as"
        " `replica.exec`.",
    ),
    Method(
        "endpoints.update",
        "PATCH",
        "/v1/endpoints/{name}",
        EndpointUpdate,
        EndpointPublic,
        summary="Change an endpoint's layout live: checked up front, then re-cut instance by instance through"
        " the layout gate, never taking a component below its minCopies.",
    ),
    Method(
        "endpoints.delete",
        "DELETE",
        "/v1/endpoints/{name}",
        EndpointDelete,
        EndpointPublic,
        summary="Delete an endpoint: its nodes go back to their pool's layout through the layout gate"
        " (dryRun: what it would do, nothing changed).",
    ),
    Method(
        "endpoints.invoke",
        "POST",
        "/v1/endpoints/{name}/invoke",
        NameRequest,
        None,
        summary="Send a model's input (raw bytes, up to 6 MiB, any Content-Type) to a ready copy of the"
        " component named by the X-Amzn-SageMaker-Inference-Component header or inferenceComponentName;"
        " the model server's answer comes back as it sent it (60 s to answer).",
    ),
    Method(
        "components.create",
        "POST",
        "/v1/components",
        ComponentCreate,
        ComponentPublic,
        summary="Deploy a model on an endpoint's partition type: each copy takes a free partition of that"
        " type; the rest wait (`pending`).",
    ),
    Method(
        "components.list",
        "GET",
        "/v1/components",
        ComponentListQuery,
        ComponentPublic,
        paged=True,
        summary="Components by name, of one endpoint (`endpointName`) or of every endpoint the caller sees.",
    ),
    Method("components.get", "GET", "/v1/components/{name}", NameRequest, ComponentPublic),
    Method(
        "components.scale",
        "POST",
        "/v1/components/{name}/scale",
        ComponentScale,
        ComponentPublic,
        summary="Set a component's copies; its partition type is fixed for its life.",
    ),
    Method(
        "components.delete",
        "DELETE",
        "/v1/components/{name}",
        NameRequest,
        ComponentPublic,
        summary="Delete a component: its partitions take other components' waiting copies.",
    ),
    Method(
        "workloads.create",
        "POST",
        "/v1/workloads",
        WorkloadCreate,
        WorkloadPublic,
        summary="Create a workload: replicas of a shape placed across clusters, a verdict per cluster.",
    ),
    Method(
        "workloads.list",
        "GET",
        "/v1/workloads",
        WorkloadListQuery,
        WorkloadPublic,
        paged=True,
        summary="Workloads with their deployments; a tenant sees its own.",
    ),
    Method("workloads.get", "GET", "/v1/workloads/{id}", IdRequest, WorkloadPublic),
    Method(
        "workloads.logs",
        "GET",
        "/v1/workloads/{id}/logs",
        WorkloadLogsRequest,
        LogsPublic,
        summary="The newest lines of a replica's container log, read through its node's agent (`tail`"
        " 1 to 10,000, default 100; at most 1 MiB).",
    ),
    Method(
        "workloads.exec",
        "POST",
        "/v1/workloads/{id}/exec",
        WorkloadExecRequest,
        ExecPublic,
        summary="Run a command (argv, no TTY, no stdin) in a replica's container through its node's agent:"
        " its exit code, stdout and stderr (1 MiB each; 1 to 60 s, default 10). Logged as `replica.exec`.",
    ),
    Method(
        "workloads.scale",
        "POST",
        "/v1/workloads/{id}/scale",
        WorkloadScale,
        WorkloadPublic,
        summary="Set a workload's replicas; `generation` makes it a compare-and-swap.",
    ),
    Method(
        "workloads.delete",
        "DELETE",
        "/v1/workloads/{id}",
        IdRequest,
        WorkloadPublic,
        summary="Delete a workload: its deployments go and its replicas' devices are freed.",
    ),
    Method(
        "deployments.list",
        "GET",
        "/v1/deployments",
        DeploymentListQuery,
        DeploymentPublic,
        paged=True,
        summary="Deployments (a workload's share in one cluster), filtered by `workloadId`.",
    ),
    Method(
        "placement.preview",
        "POST",
        "/v1/placement/preview",
        PlacementPreviewRequest,
        PlacementPreview,
        summary="What placement would choose now for a workload or a shape: clusters, shares and a "
        "verdict per cluster. Writes nothing.",
        writes_nothing=True,
    ),
    Method(
        "operations.create",
        "POST",
        "/v1/operations",
        OperationCreate,
        OperationPublic,
        summary="Start an operation: `workload.drain` moves a workload's replicas out of one cluster.",
    ),
    Method("operations.get", "GET", "/v1/operations/{id}", IdRequest, OperationPublic),
    Method(
        "reservations.create",
        "POST",
        "/v1/reservations",
        ReservationCreate,
        ReservationPublic,
        idempotency_key=True,
        summary="Book atoms of a pool for a time window.",
    ),
    Method("reservations.get", "GET", "/v1/reservations/{id}", IdRequest, ReservationPublic),
    Method(
        "reservations.list", "GET", "/v1/reservations", ReservationListQuery, ReservationPublic, paged=True
    ),
    Method(
        "reservations.cancel",
        "POST",
        "/v1/reservations/{id}/cancel",
        IdRequest,
        ReservationPublic,
        summary="Cancel a reservation before its start; its whole window frees.",
    ),
    Method(
        "reservations.release",
        "POST",
        "/v1/reservations/{id}/release",
        IdRequest,
        ReservationPublic,
        summary="End an active reservation now; the rest of its window frees.",
    ),
    Method(
        "reservations.extend",
        "POST",
        "/v1/reservations/{id}/extend",
        ReservationExtend,
        ReservationPublic,
        summary="Move a reservation's end later on the atoms it holds; CONFLICT when they are booked then.",
    ),
    Method(
        "events.list",
        "GET",
        "/v1/events",
        EventListQuery,
        EventPublic,
        paged=True,
        summary="Events the token may read, oldest first, after the event `after`; by `type` and `subject`.",
    ),
    Method(
        "usage.list",
        "GET",
        "/v1/usage",
        UsageListQuery,
        UsageRowPublic,
        paged=True,
        summary="GPU-hours per booking in a period (at most 366 days; default: this calendar month).",
    ),
    Method(
        "usage.report",
        "GET",
        "/v1/usage/report",
        UsageReportQuery,
        UsageReportPublic,
        summary="Every tenant's GPU-hours, share of the fleet and cost for one calendar month (admin).",
    ),
    Method(
        "bills.get",
        "GET",
        "/v1/bills/{tenantId}",
        BillQuery,
        BillPublic,
        summary="A tenant's GPU-hours per meter in a period, priced where the meter has a price.",
    ),
    Method(
        "prices.set",
        "PUT",
        "/v1/prices",
        PriceSet,
        PricePublic,
        summary="Set what one hour of a meter costs (admin).",
    ),
    Method("prices.list", "GET", "/v1/prices", PriceListQuery, PricePublic, paged=True),
    Method("clusters.list", "GET", "/v1/clusters", ClusterListQuery, Inventory, paged=True),
    Method("clusters.get", "GET", "/v1/clusters/{id}", IdRequest, ClusterPublic),
    Method(
        "clusters.create",
        "POST",
        "/v1/clusters",
        ClusterCreate,
        ClusterPublic,
        summary=(
            "Create an empty cluster (admin): `local`, or `slurm` with its controller, partitions,"
            " account and account mapping (docs/slurm.md)."
        ),
    ),
    Method(
        "clusters.update",
        "PATCH",
        "/v1/clusters/{id}",
        ClusterUpdate,
        ClusterPublic,
        summary=(
            "Set a cluster's phase (admin): `active` takes new work, `cordoned` and `draining` take no"
            " new placements and keep what runs."
        ),
    ),
    Method("nodes.list", "GET", "/v1/nodes", NodeListQuery, Inventory, paged=True),
    Method(
        "nodes.get",
        "GET",
        "/v1/nodes/{node}",
        NodeGet,
        NodeDetailPublic,
        summary=(
            "One node (admin): its state, GPUs and the layout each is told, atoms with the bookings"
            " holding them, and its layout change under way."
        ),
    ),
    Method(
        "nodes.slurmGres",
        "GET",
        "/v1/nodes/{node}/slurm-gres",
        NodeSlurmGresGet,
        NodeSlurmGresPublic,
        summary=(
            "What Slurm is told of one node (admin): its gres.conf lines and its slurm.conf node line,"
            " from its atoms: whole GPUs as `gpu:<model>`, MIG instances as `gpu:<profile>`, slots as"
            " `shard`."
        ),
    ),
    Method(
        "nodes.update",
        "PATCH",
        "/v1/nodes/{node}",
        NodeUpdate,
        NodePublic,
        summary="Cordon or uncordon a node (admin): its atoms take no new booking; those held stay.",
    ),
    Method(
        "nodes.joinToken",
        "POST",
        "/v1/nodes/{node}/join-tokens",
        JoinTokenCreate,
        JoinTokenIssued,
        summary="A one-time token for the node to join with (admin); valid an hour unless ttlSeconds says.",
    ),
    Method(
        "nodes.join",
        "POST",
        "/v1/nodes/{node}/join",
        NodeJoin,
        NodeJoined,
        summary="Spend a join token and register the node's Ed25519 public key (no bearer token).",
    ),
    Method(
        "nodes.report",
        "POST",
        "/v1/nodes/{node}/reports",
        NodeReportSend,
        ReportAccepted,
        summary=(
            "A report signed by the node itself: inventory, allocation bound or released, observed"
            " generation, scrub done."
        ),
    ),
    Method(
        "nodes.spec",
        "GET",
        "/v1/nodes/{node}/spec",
        NodeSpecQuery,
        NodeSpecPublic,
        summary=(
            "What the node must make true: MIG layout per GPU, sharing, assignments; signed by the node"
            " or read by the admin. `after` and `wait` wait for another generation."
        ),
    ),
    Method("gpus.list", "GET", "/v1/gpus", GpuListQuery, Inventory, paged=True),
    Method(
        "nodes.releaseGpu",
        "POST",
        "/v1/gpus/{gpu}/release",
        GpuRelease,
        GpuPublic,
        summary=(
            "Let a GPU go from its node (admin), so the next node to report it takes it; refused while a"
            " tenant's booking holds it."
        ),
    ),
    Method(
        "partitions.book",
        "POST",
        "/v1/partitions",
        PartitionBook,
        PartitionBookingPublic,
        summary=(
            "Hold every atom of a GPU, parent included, for a window (admin): `booked` (201) with its"
            " bookingId, or `conflict` (200) with `freeFrom`, when the whole family is free."
        ),
    ),
    Method(
        "partitions.release",
        "DELETE",
        "/v1/partitions/{bookingId}",
        PartitionRelease,
        PartitionReleasedPublic,
        summary="End a partition booking now (admin): the GPU takes new bookings again.",
    ),
    Method(
        "atoms.list",
        "GET",
        "/v1/atoms",
        AtomListQuery,
        Inventory,
        paged=True,
        summary=(
            "Atoms, filtered by `pool`, `class` and repeated `attr=key=value`; each says whether it is"
            " booked now and when it is next free."
        ),
    ),
    Method(
        "capacity.free",
        "GET",
        "/v1/capacity/free",
        CapacityFreeQuery,
        CapacityFree,
        summary="What a pool could book for a window, per kind of atom, and the earliest start when busy.",
    ),
    Method(
        "capacity.accounting",
        "GET",
        "/v1/capacity/accounting",
        CapacityAccountingQuery,
        CapacityAccounting,
        summary=(
            "Every GPU-hour of a range, per bucket, in exactly one state: booked, free, changing,"
            " unhealthy or cordoned; the states sum to capacity."
        ),
    ),
    Method(
        "capacity.summary",
        "GET",
        "/v1/capacity/summary",
        CapacitySummaryQuery,
        CapacitySummary,
        summary="Whole GPUs per model now: total, bookable, booked, unhealthy.",
    ),
    Method(
        "capacity.timeline",
        "GET",
        "/v1/capacity/timeline",
        CapacityTimelineQuery,
        CapacityTimeline,
        summary="Whole GPUs booked per bucket of a range: the most at once, and their GPU-hours.",
    ),
    Method(
        "capacity.byPool",
        "GET",
        "/v1/capacity/by-pool",
        CapacityByPoolQuery,
        CapacityByPool,
        summary="Atoms per pool and class now (gpu, gpu.mig, gpu.slot): total, bookable, booked.",
    ),
    Method(
        "doctor.run",
        "GET",
        "/v1/doctor",
        DoctorQuery,
        DoctorReport,
        summary=(
            "What in the fleet needs an operator (admin): each finding's code, subject, detail and"
            " action; logs a doctor.run event."
        ),
    ),
    Method(
        "replay.run",
        "POST",
        "/v1/replay",
        ReplayRun,
        ReplayReport,
        summary=(
            "Replay recorded or given demand under a fleet and a policy set with the server's own"
            " rules in virtual time (admin): GPU-hours granted and refused, waits, preemptions, cost."
        ),
    ),
)

METHODS: dict[str, Method] = {method.name: method for method in _TABLE}
"""Every API method by name (`<resource>.<verb>`)."""


def close_methods(name: str) -> list[str]:
    """The methods a mistyped `name` most likely meant (difflib), best first; none when nothing is
    close, so a wild guess is not offered as a correction."""
    return difflib.get_close_matches(name, METHODS, n=3, cutoff=0.6)


def unknown_method(name: str) -> str:
    """The one message for a method name that does not exist: the likely ones first ("did you
    mean"), then every valid one, so a typo is fixed without reading the whole list."""
    close = close_methods(name)
    hint = f"did you mean {' or '.join(repr(m) for m in close)}? " if close else ""
    return f"unknown method {name!r}; {hint}valid methods: {', '.join(sorted(METHODS))}"


def method(name: str) -> Method:
    """The method called `name`; KeyError names the likely and the valid ones."""
    try:
        return METHODS[name]
    except KeyError:
        raise KeyError(unknown_method(name)) from None
