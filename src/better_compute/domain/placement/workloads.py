"""Workloads and their deployments (docs/placement.md; seed 001): what a workload asks for, the phases of a
deployment, and the checks on a request. Placement itself is `domain.placement`.

A workload is a tenant's long-lived service of N replicas, each needing `device_count` devices of
one device class. Placement divides the replicas between clusters; each chosen cluster gets one
deployment with its share (`desired_replicas`), and the cluster's scheduler books each replica's
devices together as one open-ended allocation in the ledger, so a workload and a reservation can
never hold one atom at once. A deployment moves `pending` (waiting for quota or capacity, with a
reason) -> `admitted` (its share passed quota and the cluster had room) -> `placed` (every replica
booked) -> `running` (at least one replica bound on its node). A workload whose shape has a
`container` reads the last two from what its nodes report of the containers (seed 001: `placed`, "pods
are being created": every replica booked and its container created; `running`, "at least one replica is
ready"): `Containers`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, get_args

from better_compute.domain.fleet.replica_states import ReplicaState, exists, is_ready
from better_compute.domain.kernel.containers import ContainerSpec, parse_container
from better_compute.domain.kernel.errors import InvalidInput, NotFound
from better_compute.domain.placement.capability import Capability, parse_capability
from better_compute.domain.placement.shares import STRATEGIES, Strategy
from better_compute.domain.placement.topology import DOMAIN_KINDS, DomainKind
from better_compute.domain.placement.verdicts import Reason
from better_compute.domain.tenancy.tenancy import check_class_name, check_ref, check_slug

if TYPE_CHECKING:
    from better_compute.domain.placement.commands import PlaceWorkload

Phase = Literal["pending", "admitted", "placed", "running"]
PHASES: tuple[Phase, ...] = get_args(Phase)

MAX_REPLICAS = 10_000
"""The most replicas one workload may ask for: far above any one service, small enough that placing
them (one allocation each) stays one short transaction."""
MAX_DEVICE_COUNT = 64
"""The most devices one replica may ask for (a replica sits on one node)."""
MAX_FLOORS = 64
"""The most clusters `cluster_floors` may name."""
MAX_CLUSTERS = 1_000
"""The largest `max_clusters` taken."""

REPLICA_SEPARATOR = ".r"
"""Between a replica's deployment and its number: `.` keeps the id a valid CDI device name (the
node hands the replica to its container under it) and a single URL path segment."""


def replica_allocation_id(deployment_id: str, index: int) -> str:
    """The ledger allocation of one replica: `<deploymentId>.r<n>`."""
    return f"{deployment_id}{REPLICA_SEPARATOR}{index}"


def replica_index(allocation_id: str) -> int | None:
    """The replica number of a replica allocation's id, or None for any other allocation."""
    head, sep, tail = allocation_id.rpartition(REPLICA_SEPARATOR)
    return int(tail) if sep and head.startswith("dep-") and tail.isdigit() else None


def is_replica(allocation_id: str) -> bool:
    return replica_index(allocation_id) is not None


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """A workload as asked for (checked), before it has an id."""

    name: str
    tenant_id: str
    device_class: str
    device_count: int
    replicas: int
    strategy: Strategy = "pack"
    cluster_floors: Mapping[str, int] = field(default_factory=dict)
    max_clusters: int | None = None
    priority_class: str = "standard"
    pinned_cluster: str | None = None
    single_domain: bool = False
    domain_kind: DomainKind | None = None
    allowed_regions: tuple[str, ...] = ()
    allowed_clusters: tuple[str, ...] = ()
    drained_clusters: tuple[str, ...] = ()
    """Clusters a `workload.drain` took the workload out of: placement leaves them out from then on."""
    capability: Capability | None = None
    """What each device must give, when the shape asked so: `device_class` is then the implicit
    class it resolved to at creation (`domain.placement.capability`), empty until it is resolved."""
    container: ContainerSpec | None = None
    """What each replica runs (`shape.container`, docs/placement.md#what-runs); None: nothing is
    started for it (its holder starts its own container on the devices it is handed)."""

    @property
    def topology_kind(self) -> DomainKind | None:
        """The domain kind a replica must fit in (nvlink when required without a kind), or None."""
        return (self.domain_kind or "nvlink") if self.single_domain else None


@dataclass(frozen=True, slots=True)
class Workload:
    id: str
    spec: WorkloadSpec
    generation: int
    created_at: datetime
    unplaced: int = 0
    """Replicas no cluster could take at the last placement (retried as capacity or quota frees)."""
    reason: Reason | None = None
    """Why, when replicas are unplaced: the reason of the cluster that came closest."""
    policy_id: str | None = None
    """The `<name>-placement` policy made from `allowed_regions`/`allowed_clusters`, if any."""

    @property
    def tenant_id(self) -> str:
        return self.spec.tenant_id


@dataclass(frozen=True, slots=True)
class Deployment:
    """A workload's share in one cluster."""

    id: str
    workload_id: str
    tenant_id: str
    cluster_id: str
    desired_replicas: int
    phase: Phase
    reason: Reason | None
    message: str
    shortfall: int
    created_at: datetime
    updated_at: datetime
    generation: int = 1
    next_replica: int = 0
    """The index its next replica takes: a replica's allocation id is never another's."""
    preempted_by: str | None = None
    """The workload whose placement evicted replicas of this deployment (reason `preempted`)."""


class RunningReplica(NamedTuple):
    """A booked replica and whose it is: what a preemption reads of its candidates (a named
    tuple: a cluster's thousands are read per decision)."""

    allocation_id: str
    number: int
    """The replica's number in its deployment."""
    deployment_id: str
    workload_id: str
    tenant_id: str
    cluster_id: str
    priority_class: str


@dataclass(frozen=True, slots=True)
class Terminating:
    """A replica taken away (a scale down, a drain, a delete) while its node had it handed over.
    Seed 001: "A device allocated to a replica that's terminating still counts as allocated until
    the allocation is removed": its allocation keeps its devices booked until the node reports it
    released (`hands_over` says when a replica must wait for that)."""

    allocation_id: str
    tenant_id: str
    workload_id: str
    deployment_id: str
    cluster_id: str
    since: datetime
    preempted_by: str | None = None
    """The workload whose placement evicted it (None: a scale down, a drain or a delete)."""


HANDED_OVER: tuple[str, ...] = ("bound",)
"""Binding states a node reports once it has given an allocation's devices to a container. A
`device-missing` allocation was never handed over (its node lacks a device), so nothing waits on
its node to take it back."""


def hands_over(reported: Mapping[str, str]) -> bool:
    """Whether a replica being taken away must terminate (wait for its node) rather than end at
    once: some node reported it handed over and has not released it. A replica no node has spoken
    of, or one every node refused or released, holds nothing on a node."""
    return any(state in HANDED_OVER for state in reported.values())


OPERATION_PAYLOADS: Mapping[str, str] = {"workload.drain": "cluster", "replica.release": "allocation"}
"""Each operation type's one payload key."""


def operation_target(
    type_: str,
    workload_id: str | None,
    payload: Mapping[str, str],
    *,
    dry_run: bool = False,
    force: bool = False,
) -> str:
    """The payload value an operation acts on, once its request has what its type needs (a drain
    names its workload and `{cluster}`; a replica.release names no workload, only `{allocation}`,
    and has no dry run and nothing to force): INVALID_INPUT naming the field otherwise."""
    key = OPERATION_PAYLOADS[type_]
    unknown = sorted(k for k in payload if k != key)
    if unknown or key not in payload:
        raise InvalidInput(
            f"payload must be {{{key}}} for {type_}" + (f"; unknown: {unknown[0]}" if unknown else ""),
            {"field": "payload"},
        )
    if type_ == "replica.release" and workload_id is not None:
        raise InvalidInput(
            "replica.release names its replica by payload.allocation, not by workloadId",
            {"field": "workloadId"},
        )
    if type_ == "replica.release" and (dry_run or force):
        field = "dryRun" if dry_run else "force"
        raise InvalidInput(f"{field} is for workload.drain only, not replica.release", {"field": field})
    if type_ == "workload.drain" and workload_id is None:
        raise InvalidInput("workload.drain needs the workloadId it drains", {"field": "workloadId"})
    return payload[key]


@dataclass(frozen=True, slots=True)
class Containers:
    """What the nodes said of a deployment's replicas' containers: how many exist on their node and
    how many are ready (`domain.fleet.replica_states`)."""

    existing: int
    ready: int


def phase_of(
    desired: int, booked: int, bound: int, blocked: bool, containers: Containers | None = None
) -> Phase:
    """A deployment's phase from its replicas: `running` once one is bound on its node, `placed`
    once all are booked, `admitted` while its share is admitted and replicas remain to book,
    `pending` while the cluster cannot take them (`blocked`: quota, capacity, topology, policy).

    With `containers` (a workload whose shape has a container), binding is not running: `placed`
    needs every replica booked and its container created on its node, `running` one ready replica
    (seed 001). A deployment booked whose containers do not all exist yet stays `admitted`."""
    if containers is not None:
        if containers.ready > 0:
            return "running"
        if booked >= desired and containers.existing >= booked:
            return "placed"
        return "pending" if blocked else "admitted"
    if bound > 0:
        return "running"
    if booked >= desired:
        return "placed"
    return "pending" if blocked else "admitted"


def replica_state(states: Sequence[ReplicaState]) -> ReplicaState | None:
    """What the node of a replica last said of its container. A replica sits on one node and only
    the node holding its atoms may report on it (`service.fleet.node_reports`), so there is at most
    one; the latest stands should there be more."""
    return max(states, key=lambda s: (s.updated_at, s.node_id), default=None)


def containers_of(
    allocation_ids: Sequence[str], states: Mapping[str, Sequence[ReplicaState]], live: Set[str]
) -> Containers:
    """How many of these replicas' containers exist, and how many are ready: said ready by a node
    that is `live` (`replica_states.is_ready`; a silent node's replicas still exist, not ready)."""
    mine = [replica_state(states.get(a, ())) for a in allocation_ids]
    return Containers(sum(1 for s in mine if exists(s)), sum(1 for s in mine if is_ready(s, live)))


MAX_PROBLEMS = 20
"""The most replica problems one deployment lists (doctor lists them all)."""


def problems_of(
    allocation_ids: Sequence[str], states: Mapping[str, Sequence[ReplicaState]], limit: int = MAX_PROBLEMS
) -> list[ReplicaState]:
    """The replicas whose container has a problem (crash-looping, image-not-found, create-failed), in
    replica order, at most `limit`."""
    out: list[ReplicaState] = []
    for a in allocation_ids:
        s = replica_state(states.get(a, ()))
        if s is not None and s.problem is not None and s.state != "removed":
            out.append(s)
            if len(out) >= limit:
                break
    return out


def _int(raw: object, field: str, low: int, high: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= high:
        raise InvalidInput(
            f"{field} must be an integer from {low} to {high:,}, not {raw!r}"[:200],
            {"field": field, "min": low, "max": high},
        )
    return raw


def check_replicas(raw: object, field: str = "replicas") -> int:
    return _int(raw, field, 0, MAX_REPLICAS)


def check_shape(raw: object) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise InvalidInput("shape must be an object with deviceClass and deviceCount", {"field": "shape"})
    return raw


def check_one_class(device_class: object, capability: object) -> None:
    """A shape asks by `deviceClass` or by `capability`, never both."""
    if capability is not None and device_class is not None:
        raise InvalidInput(
            "give shape.deviceClass or shape.capability, not both", {"field": "shape.capability"}
        )


def check_strategy(raw: object) -> Strategy:
    """`pack` or `spread`."""
    for strategy in STRATEGIES:
        if raw == strategy:
            return strategy
    raise InvalidInput(f"strategy must be pack or spread, not {raw!r}"[:200], {"field": "strategy"})


def check_floor_map(raw: object) -> Mapping[str, object]:
    """`clusterFloors`: an object of at most MAX_FLOORS cluster ids (its counts checked by
    `workload_spec`)."""
    if not isinstance(raw, Mapping) or len(raw) > MAX_FLOORS:
        raise InvalidInput(
            f"clusterFloors must be an object of at most {MAX_FLOORS} cluster ids to counts",
            {"field": "clusterFloors"},
        )
    return raw


def check_max_clusters(raw: object) -> int:
    return _int(raw, "maxClusters", 1, MAX_CLUSTERS)


def check_device_count(raw: object) -> int:
    return _int(raw, "shape.deviceCount", 1, MAX_DEVICE_COUNT)


def check_floor(raw: object, cluster: str) -> int:
    return _int(raw, f"clusterFloors.{cluster}", 0, MAX_REPLICAS)


def check_single_domain(raw: object) -> bool:
    if not isinstance(raw, bool):
        raise InvalidInput(
            "requiresSingleTopologyDomain must be true or false", {"field": "requiresSingleTopologyDomain"}
        )
    return raw


def check_domain_kind(raw: object) -> DomainKind | None:
    """`topologyDomainKind`: one of DOMAIN_KINDS, or None."""
    if raw is None:
        return None
    for kind in DOMAIN_KINDS:
        if raw == kind:
            return kind
    raise InvalidInput(
        f"topologyDomainKind must be one of {', '.join(DOMAIN_KINDS)}, not {raw!r}"[:200],
        {"field": "topologyDomainKind", "allowed": list(DOMAIN_KINDS)},
    )


def check_refs(raw: object, field: str) -> tuple[str, ...]:
    """`allowedRegions`, `allowedClusters`: at most MAX_FLOORS ids, each once (None: none)."""
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple) or len(raw) > MAX_FLOORS:
        raise InvalidInput(f"{field} must be a list of at most {MAX_FLOORS} names", {"field": field})
    return tuple(dict.fromkeys(check_ref(v, f"{field}[{i}]") for i, v in enumerate(raw)))


def workload_spec(asked: PlaceWorkload, tenant_id: str) -> WorkloadSpec:
    """A workload request's checked fields, each refusal naming its field, in the order they were
    always checked in (a request wrong twice is refused for the same field as before). The types
    are the command's (`domain.placement.commands`); what is checked here is what they may be."""
    shape = asked.shape
    strategy = check_strategy(asked.strategy)
    replicas = check_replicas(asked.replicas)
    floors_raw = check_floor_map(asked.cluster_floors)
    floors = {check_ref(c, "clusterFloors"): check_floor(n, c) for c, n in sorted(floors_raw.items())}
    check_floors(floors, replicas)
    max_clusters = None if asked.max_clusters is None else check_max_clusters(asked.max_clusters)
    single = check_single_domain(asked.requires_single_topology_domain)
    kind = check_domain_kind(asked.topology_domain_kind)
    capability = None
    if shape.capability is not None:
        check_one_class(shape.device_class, shape.capability)
        capability = parse_capability(shape.capability)
    return WorkloadSpec(
        name=check_slug(asked.name, "name"),
        tenant_id=tenant_id,
        device_class="" if capability is not None else _class_of(shape.device_class),
        capability=capability,
        device_count=check_device_count(shape.device_count),
        replicas=replicas,
        strategy=strategy,
        cluster_floors=floors,
        max_clusters=max_clusters,
        priority_class=check_class_name(asked.priority_class or "standard", "priorityClass"),
        pinned_cluster=None if asked.cluster is None else check_ref(asked.cluster, "cluster"),
        single_domain=single,
        domain_kind=kind,
        allowed_regions=check_refs(asked.allowed_regions, "allowedRegions"),
        allowed_clusters=check_refs(asked.allowed_clusters, "allowedClusters"),
        container=None if shape.container is None else parse_container(shape.container, "shape.container"),
    )


def _class_of(value: object) -> str:
    if value is None:
        raise InvalidInput(
            "shape needs deviceClass, or capability (what each device must give)",
            {"field": "shape.deviceClass"},
        )
    return check_class_name(value, "shape.deviceClass")


def check_floors(floors: Mapping[str, int], replicas: int) -> None:
    """Floors may not add up to more replicas than the workload has."""
    if sum(floors.values()) > replicas:
        raise InvalidInput(
            f"clusterFloors add up to {sum(floors.values())} replicas, more than the {replicas} asked for",
            {"field": "clusterFloors", "floors": sum(floors.values()), "replicas": replicas},
        )


def placement_policy_name(workload_name: str) -> str:
    """The policy a workload's own `allowed_regions`/`allowed_clusters` become."""
    return f"{workload_name}-placement"


def workload_not_found(ref: str) -> NotFound:
    return NotFound(f"workload {ref} not found", {"workloadId": ref})


__all__ = [
    "HANDED_OVER",
    "MAX_DEVICE_COUNT",
    "MAX_PROBLEMS",
    "MAX_REPLICAS",
    "OPERATION_PAYLOADS",
    "PHASES",
    "Containers",
    "Deployment",
    "Phase",
    "Terminating",
    "Workload",
    "WorkloadSpec",
    "check_device_count",
    "check_domain_kind",
    "check_floor",
    "check_floor_map",
    "check_floors",
    "check_max_clusters",
    "check_one_class",
    "check_refs",
    "check_replicas",
    "check_shape",
    "check_single_domain",
    "check_strategy",
    "containers_of",
    "hands_over",
    "is_replica",
    "operation_target",
    "phase_of",
    "placement_policy_name",
    "problems_of",
    "replica_allocation_id",
    "replica_index",
    "replica_state",
    "workload_not_found",
    "workload_spec",
]
