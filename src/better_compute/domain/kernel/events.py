"""Every event type and its payload: the one contract between the writers of the log and its readers.

Each event is a frozen dataclass named after what happened; its `TYPE` is the name stored and shown
(`ledger.booked`), its `subject` what it happened to (an allocation, a pool, a node), and its other
fields the payload. `payload()` spells the payload as it is stored (camelCase keys, ISO 8601
times) and `parse_event` reads it back, so a writer and a reader cannot disagree on a key: both
stores write from these definitions (the booking statements' JSON comes from `LedgerBooked.COLUMNS`,
docs/adr/0006-one-event-contract.md) and every consumer (the booking index, metering, reconcilers)
reads parsed events, never raw payloads.

A reader meets events of types it does not know (written by a newer server) as `UnknownEvent`, and
keys it does not know are ignored: the log is forward compatible like the wire.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from better_compute.domain.kernel.errors import InvalidInput


def _key(name: str, default: Any = dataclasses.MISSING) -> Any:
    """A field whose payload key is not its name in camelCase (`class`, `from`, `to`)."""
    return field(default=default, metadata={"key": name})


@dataclass(frozen=True, slots=True)
class Event:
    """The base of every event: what it happened to. Subclasses set `TYPE`."""

    TYPE: ClassVar[str] = ""
    subject: str

    def payload(self) -> dict[str, Any]:
        """The payload as stored: every field but `subject`, by its key."""
        return {key: _dump(getattr(self, name)) for name, key, _ in _fields(type(self))}


# -- The ledger: bookings, their end, partition changes -------------------------------------------


@dataclass(frozen=True, slots=True)
class LedgerBooked(Event):
    """Atoms were booked for an allocation (one event per booking row; `subject`: the allocation)."""

    TYPE: ClassVar[str] = "ledger.booked"
    COLUMNS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("atoms", "atom_id"),
        ("tenantId", "tenant_id"),
        ("poolId", "pool_id"),
        ("class", "class"),
        ("start", "starts_at"),
        ("end", "ends_at"),
        ("gpuId", "gpu_id"),
    )
    """Each payload key and the booking column it is written from, by the statements that book (the
    booking's one atom as a one-element list)."""

    atoms: tuple[str, ...]
    start: datetime
    end: datetime | None = None
    tenant_id: str | None = None
    pool_id: str | None = None
    cls: str | None = _key("class", None)
    gpu_id: str | None = None
    """The GPU of the booked atom (None in events written before it was recorded): a GPU is booked
    whole or in parts, never both at once (`domain.ledger.ledger.family_excludes`)."""


@dataclass(frozen=True, slots=True)
class LedgerReleased(Event):
    """An allocation's live bookings were cut at `at`; those not yet started were cancelled."""

    TYPE: ClassVar[str] = "ledger.released"
    at: datetime


@dataclass(frozen=True, slots=True)
class LedgerExtended(Event):
    """An allocation's live bookings were extended: they now end at `end` (`subject`: the allocation)."""

    TYPE: ClassVar[str] = "ledger.extended"
    end: datetime


@dataclass(frozen=True, slots=True)
class LedgerCancelled(Event):
    """An allocation's live bookings were cancelled before they started."""

    TYPE: ClassVar[str] = "ledger.cancelled"
    at: datetime


@dataclass(frozen=True, slots=True)
class PartitionBooked(Event):
    """A GPU's whole family of atoms was booked for a MIG layout change (`subject`: the GPU)."""

    TYPE: ClassVar[str] = "gpu.partition.booked"
    booking_id: str
    atoms: tuple[str, ...]
    start: datetime


@dataclass(frozen=True, slots=True)
class PartitionReleased(Event):
    """A partition change ended (`subject`: its allocation)."""

    TYPE: ClassVar[str] = "gpu.partition.released"
    at: datetime


# -- Reservations --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReservationCreated(Event):
    TYPE: ClassVar[str] = "reservation.created"
    tenant_id: str
    pool_id: str
    atoms: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReservationCancelled(Event):
    TYPE: ClassVar[str] = "reservation.cancelled"
    at: datetime


@dataclass(frozen=True, slots=True)
class ReservationReleased(Event):
    TYPE: ClassVar[str] = "reservation.released"
    at: datetime


@dataclass(frozen=True, slots=True)
class ReservationExtended(Event):
    """A reservation's end moved later (`reservations.extend`); `end` is its new end."""

    TYPE: ClassVar[str] = "reservation.extended"
    end: datetime


# -- Tenancy -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TenantCreated(Event):
    TYPE: ClassVar[str] = "tenant.created"
    name: str


@dataclass(frozen=True, slots=True)
class TenantDeleted(Event):
    """A tenant was deleted: its credentials were revoked, its quota rows and policies removed."""

    TYPE: ClassVar[str] = "tenant.deleted"
    revoked_credentials: int
    removed_quotas: int
    removed_policies: int


@dataclass(frozen=True, slots=True)
class CredentialCreated(Event):
    TYPE: ClassVar[str] = "credential.created"
    tenant_id: str | None
    is_admin: bool


@dataclass(frozen=True, slots=True)
class CredentialRevoked(Event):
    TYPE: ClassVar[str] = "credential.revoked"
    tenant_id: str | None


@dataclass(frozen=True, slots=True)
class PolicyCreated(Event):
    """A policy was created (`subject`: the policy). `tenantId` is None for a cluster's policy,
    which belongs to no tenant; `subjectType` and `subjectId` say what it is attached to (absent
    from events written before policies had subjects: those were their tenant's)."""

    TYPE: ClassVar[str] = "policy.created"
    tenant_id: str | None
    name: str
    subject_type: str | None = None
    subject_id: str | None = None


@dataclass(frozen=True, slots=True)
class PolicyUpdated(Event):
    """A policy's limits and/or constraints were replaced (`subject`: the policy); `generation` is
    its new one."""

    TYPE: ClassVar[str] = "policy.updated"
    tenant_id: str | None
    name: str
    generation: int


@dataclass(frozen=True, slots=True)
class PolicyDeleted(Event):
    TYPE: ClassVar[str] = "policy.deleted"
    tenant_id: str | None
    name: str


@dataclass(frozen=True, slots=True)
class QuotaSet(Event):
    """A tenant's quota rows were written: pool rows (`subject`: the pool; `quota` maps atom class to
    limit) or one device-class row (`subject`: the device class; `quota` maps it to
    `guaranteedDevices`, and the row's other fields follow). The fields of device-class rows are left
    out of a pool row's payload, which stays as it was before they existed."""

    TYPE: ClassVar[str] = "quota.set"
    tenant_id: str
    quota: Mapping[str, int]
    device_class: str | None = None
    scope: str | None = None
    cluster_id: str | None = None
    guaranteed_devices: int | None = None
    floor_devices: int | None = None
    over_quota_weight: float | None = None

    def payload(self) -> dict[str, Any]:
        return {k: v for k, v in Event.payload(self).items() if v is not None}


@dataclass(frozen=True, slots=True)
class PoolOffered(Event):
    """A pool was offered to a tenant with these quota rows (`subject`: the pool)."""

    TYPE: ClassVar[str] = "pool.offered"
    tenant_id: str
    quota: Mapping[str, int]


# -- Billing -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PriceSet(Event):
    """A meter's price was set (`subject`: the meter); it prices every bill read from now on."""

    TYPE: ClassVar[str] = "price.set"
    per_hour: str
    currency: str


# -- Device and priority classes ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceClassCreated(Event):
    """A device class was created (`subject`: its name); `selector` as `selectors.document` spells it."""

    TYPE: ClassVar[str] = "device_class.created"
    cls: str = _key("class")
    selector: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PriorityClassCreated(Event):
    """A priority class was created (`subject`: its name)."""

    TYPE: ClassVar[str] = "priority_class.created"
    priority: int
    preemptible: bool


# -- Inference endpoints --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class EndpointCreated(Event):
    """An endpoint was created (`subject`: its name): `Creating` with the nodes its variants took,
    whose GPUs are being cut to its layout, or `Failed` with the reason (nothing taken)."""

    TYPE: ClassVar[str] = "endpoint.created"
    tenant_id: str
    status: str
    instances: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class EndpointUpdated(Event):
    """A live relayout's progress (`subject`: the endpoint): `Updating` when it starts and as each
    instance (`node`) starts being re-cut to `layout`; `InService` once every instance has its
    variant's layout; `reason` when a step waits (a component would drop below its minCopies).
    `Creating` when a `Failed` endpoint, taken again as capacity freed, took its nodes."""

    TYPE: ClassVar[str] = "endpoint.updated"
    tenant_id: str
    status: str
    node: str = ""
    layout: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class EndpointDeleted(Event):
    """An endpoint was deleted (`subject`: its name): its nodes go back to their pool's layout
    through the layout gate and then take tenants' work again."""

    TYPE: ClassVar[str] = "endpoint.deleted"
    tenant_id: str
    instances: int


@dataclass(frozen=True, slots=True)
class ComponentChanged(Event):
    """A component was created, scaled or deleted (`change`; `subject`: its name): its copies, how
    many have a partition (`placed`) and how many wait for one."""

    TYPE: ClassVar[str] = "component.changed"
    tenant_id: str
    endpoint: str
    change: str
    copies: int
    placed: int


# -- Workloads ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class WorkloadCreated(Event):
    """A workload was created (`subject`: its id)."""

    TYPE: ClassVar[str] = "workload.created"
    tenant_id: str
    name: str
    device_class: str
    device_count: int
    replicas: int


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


# -- Pools and inventory -------------------------------------------------------------------------


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
class MigLayoutRequested(Event):
    """A mig pool's layout changed; the MIG layout gate repartitions its nodes' GPUs."""

    TYPE: ClassVar[str] = "pool.mig_layout.requested"
    from_layout: str = _key("from")
    to_layout: str = _key("to")
    nodes: tuple[str, ...] = ()


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
class NodeMigScheduled(Event):
    """The layout gate booked every GPU family of a node from `at` onward, when the node's last
    booking ends (`subject`: the node); the change is granted then."""

    TYPE: ClassVar[str] = "node.mig.scheduled"
    pool: str
    at: datetime
    layout: str


@dataclass(frozen=True, slots=True)
class NodeMigGranted(Event):
    """A node is told its pool's new layout (`subject`: the node); `released` when nothing will
    repartition it (it keeps its own layout), so its holds ended at once."""

    TYPE: ClassVar[str] = "node.mig.granted"
    pool: str
    layout: str
    released: bool = False


@dataclass(frozen=True, slots=True)
class NodeMigApplied(Event):
    """A node converged its new layout, or the change was undone (`undone`): its partition
    bookings are released and its atoms take work (`subject`: the node)."""

    TYPE: ClassVar[str] = "node.mig.applied"
    pool: str
    layout: str
    undone: bool = False


@dataclass(frozen=True, slots=True)
class NodeRebootRequired(Event):
    """A node's inventory newly says GPUs wait for a reboot: a MIG mode change needed a GPU reset
    that failed (`subject`: the node)."""

    TYPE: ClassVar[str] = "node.reboot_required"
    gpus: tuple[str, ...]


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
class FleetRegistered(Event):
    TYPE: ClassVar[str] = "fleet.registered"
    clusters: int
    nodes: int
    pools: int


@dataclass(frozen=True, slots=True)
class DoctorRun(Event):
    """`better-compute doctor` ran (`subject`: `fleet`): how many findings, and how many of each
    code (docs/operations.md#doctor). One event per run, not one per finding: a doctor run every
    minute by a cron job would otherwise repeat every standing finding into the stream."""

    TYPE: ClassVar[str] = "doctor.run"
    findings: int
    counts: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class UnknownEvent(Event):
    """An event of a type this version does not know, kept as stored."""

    type: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        return dict(self.raw)


EVENT_TYPES: dict[str, type[Event]] = {
    cls.TYPE: cls
    for cls in (
        LedgerBooked,
        LedgerReleased,
        LedgerExtended,
        LedgerCancelled,
        PartitionBooked,
        PartitionReleased,
        ReservationCreated,
        ReservationCancelled,
        ReservationReleased,
        ReservationExtended,
        TenantCreated,
        TenantDeleted,
        CredentialCreated,
        CredentialRevoked,
        PolicyCreated,
        PolicyUpdated,
        PolicyDeleted,
        QuotaSet,
        PoolOffered,
        PriceSet,
        DeviceClassCreated,
        PriorityClassCreated,
        EndpointCreated,
        EndpointUpdated,
        EndpointDeleted,
        ComponentChanged,
        WorkloadCreated,
        WorkloadScaled,
        WorkloadDeleted,
        DeploymentUpdated,
        ReplicasTerminating,
        WorkloadPreempted,
        ReservationPreempted,
        WorkloadDecided,
        PoolCreated,
        PoolUpdated,
        PoolDeleted,
        MigLayoutRequested,
        ClusterUpdated,
        NodeCordoned,
        NodeUncordoned,
        NodeInventoryChanged,
        NodeJoined,
        NodeReportRefused,
        GpuReleased,
        NodeScrubbed,
        NodeRebootRequired,
        NodeMigScheduled,
        NodeMigGranted,
        NodeMigApplied,
        AllocationBound,
        AllocationReleased,
        FleetRegistered,
        DoctorRun,
    )
}


def type_of(event: Event) -> str:
    """The type an event is stored under."""
    return event.type if isinstance(event, UnknownEvent) else event.TYPE


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """An event as read from the log: its id, the transaction that wrote it (PostgreSQL; None on
    SQLite) and the event itself."""

    id: int
    tx: int | None
    event: Event


@dataclass(frozen=True, slots=True)
class StreamedEvent:
    """An event as the events stream (`events.list`) serves it: its id, when it was logged, and the
    event itself."""

    id: int
    at: datetime
    event: Event


TYPE_NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")
"""How event types are spelled: dotted lowercase words (`ledger.booked`, `pool.mig_layout.requested`)."""

MAX_TYPE = 64
"""The longest event type the log stores (the `events.type` column)."""

MAX_EVENT_ID = 2**63 - 1
"""The largest event id a log can hand out (a 64-bit signed integer)."""


def check_event_type(value: str, field: str = "type") -> str:
    """An event type named in a query: spelled as types are, though it may be one this version does
    not know yet (a newer server's), which then simply matches nothing it wrote."""
    if len(value) > MAX_TYPE or not TYPE_NAME.fullmatch(value):
        raise InvalidInput(
            f"{field} must be dotted lowercase words such as ledger.booked (at most {MAX_TYPE}"
            f" characters), not {value[:MAX_TYPE]!r}",
            {"field": field},
        )
    return value


def check_event_id(value: str, field: str = "after") -> int:
    """An event id named in a query (the cursor of the events stream): a positive integer."""
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19 or not 0 < int(text) <= MAX_EVENT_ID:
        raise InvalidInput(
            f"{field} must be an event id (a positive integer, the id of an event already read),"
            f" not {value[:32]!r}",
            {"field": field},
        )
    return int(text)


def parse_event(type_: str, subject: str, payload: Mapping[str, Any] | None) -> Event:
    """The event stored as (`type_`, `subject`, `payload`); unknown payload keys are ignored, and an
    unknown type is an `UnknownEvent`. A known type whose payload lacks a required key, or holds
    a value of the wrong kind, is INVALID_INPUT naming the key."""
    cls = EVENT_TYPES.get(type_)
    data = payload or {}
    if cls is None:
        return UnknownEvent(subject, type_, dict(data))
    values: dict[str, Any] = {"subject": subject}
    for name, key, load in _fields(cls):
        if key in data:
            try:
                values[name] = load(data[key])
            except _NotA as bad:
                where = f"{type_}.{key}"
                raise InvalidInput(f"event field {where} must be {bad.kind}", {"field": where}) from None
    try:
        return cls(**values)
    except TypeError:
        missing = [k for n, k, _ in _fields(cls) if n not in values]
        raise InvalidInput(f"event {type_} lacks {missing}", {"type": type_, "missing": missing}) from None


# -- Encoding ------------------------------------------------------------------------------------


Loader = Callable[[Any], Any]

_FIELDS: dict[type[Event], tuple[tuple[str, str, Loader], ...]] = {}


def _fields(cls: type[Event]) -> tuple[tuple[str, str, Loader], ...]:
    """(field name, payload key, how to read its value) of every payload field of an event type,
    worked out once per type: the tail parses every event each process reads."""
    known = _FIELDS.get(cls)
    if known is not None:
        return known
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.name == "subject":
            continue
        key = f.metadata.get("key") or _camel(f.name)
        out.append((f.name, key, _loader(hints[f.name])))
    _FIELDS[cls] = tuple(out)
    return _FIELDS[cls]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _dump(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, tuple):
        return [_dump(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _dump(v) for k, v in value.items()}
    return value


def parse_time(value: object) -> datetime:
    """A stored time: ISO 8601, with an offset (PostgreSQL's JSON, Python's isoformat) or naive UTC
    (SQLite's text)."""
    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


class _NotA(Exception):
    """A stored value is not of its field's kind (`kind` says what it must be)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _loader(hint: Any) -> Loader:
    """How to read a stored value of a field typed `hint` (None passes where the type allows it)."""
    args = typing.get_args(hint)
    if type(None) in args:
        inner = _loader(next(a for a in args if a is not type(None)))
        return lambda value: None if value is None else inner(value)
    origin = typing.get_origin(hint)
    if hint is datetime:
        return parse_time
    if origin is tuple:
        return _tuple
    if origin is Mapping or hint is Mapping:
        return _mapping
    if hint is bool:
        return bool
    if hint is int:
        return _int
    return _same


def _same(value: Any) -> Any:
    return value


def _tuple(value: Any) -> tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise _NotA("a list")
    return tuple(value)


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _NotA("a mapping")
    return dict(value)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _NotA("an integer")
    return value
