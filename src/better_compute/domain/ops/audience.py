"""Who may read which events of the log (`events.list`): the one table of that rule.

The fleet admin reads every event. A tenant token reads the events about its own tenant, and only
those: an event of a type listed here, whose tenant is found as the entry says, is the tenant's when
that tenant is the caller's. Every other event (inventory, fleet registration, partition changes,
pools the tenant cannot see, and any type this version does not know) is the admin's alone, so a
new event type stays hidden from tenants until it is given an entry here; nothing is shown by
default, and no answer carries another tenant's ids.

How the tenant of an event is found, by the kind of its entry:

- `NamedInPayload(key)`: the payload names it (`ledger.booked`'s `tenantId`, `pool.created`'s
  `ownerTenantId`);
- `SubjectIsTenant`: the event is about the tenant itself (`tenant.created`, `tenant.deleted`);
- `SubjectIsReservation`: the event is about an allocation, and the tenant is that reservation's
  (`ledger.released`, `reservation.cancelled`, ...); a partition change has no reservation, so its
  events stay the admin's;
- `SubjectIsPool`: the event is about a pool; every tenant that sees the pool now (its owner, and a
  tenant with quota rows in it: `tenancy.sees_pool`) reads the pool's events from the pool's creation
  on, so a pool id used again after a delete does not show the earlier pool's history. A deleted
  pool is seen by no tenant, its deletion included.

The stores turn this table into the filter of their query (storage/kernel/event_stream.py), so a reader
is never handed an event it then has to be kept from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from better_compute.domain.endpoints.events import (
    ComponentChanged,
    EndpointCreated,
    EndpointDeleted,
    EndpointUpdated,
)
from better_compute.domain.fleet.events import (
    AllocationBound,
    AllocationReleased,
    ClusterCreated,
    ClusterUpdated,
    GpuReleased,
    NodeCordoned,
    NodeInventoryChanged,
    NodeJoined,
    NodeLayoutRefused,
    NodeRebootRequired,
    NodeReportRefused,
    NodeScrubbed,
    NodeUncordoned,
    PoolCreated,
    PoolDeleted,
    PoolUpdated,
    ReplicaExec,
    ReplicaExecFinished,
    ReplicaReadinessChanged,
)
from better_compute.domain.gate.events import (
    MigLayoutRequested,
    NodeMigApplied,
    NodeMigGranted,
    NodeMigScheduled,
)
from better_compute.domain.ledger.events import (
    LedgerBooked,
    LedgerCancelled,
    LedgerExtended,
    LedgerRebound,
    LedgerReleased,
    PartitionBooked,
    PartitionReleased,
    ReservationCancelled,
    ReservationCreated,
    ReservationExtended,
    ReservationReleased,
)
from better_compute.domain.metering.events import PriceSet
from better_compute.domain.ops.events import DoctorRun, FleetRegistered
from better_compute.domain.placement.events import (
    DeploymentUpdated,
    DeviceClassCreated,
    PriorityClassCreated,
    ReplicasTerminating,
    ReservationPreempted,
    WorkloadCreated,
    WorkloadDecided,
    WorkloadDeleted,
    WorkloadDrained,
    WorkloadPreempted,
    WorkloadScaled,
)
from better_compute.domain.tenancy.events import (
    CredentialCreated,
    CredentialRevoked,
    PolicyCreated,
    PolicyDeleted,
    PolicyUpdated,
    PoolOffered,
    QuotaSet,
    TenantCreated,
    TenantDeleted,
    TenantUpdated,
)


@dataclass(frozen=True)
class NamedInPayload:
    """The event's tenant is the value of this payload key."""

    key: str


@dataclass(frozen=True)
class SubjectIsTenant:
    """The event's subject is its tenant's id."""


@dataclass(frozen=True)
class SubjectIsReservation:
    """The event's subject is a reservation id; its tenant is the reservation's."""


@dataclass(frozen=True)
class SubjectIsPool:
    """The event's subject is a pool id; tenants that see the pool read it (see the module)."""


Audience = NamedInPayload | SubjectIsTenant | SubjectIsReservation | SubjectIsPool

TENANT_AUDIENCE: Mapping[str, Audience] = {
    LedgerBooked.TYPE: NamedInPayload("tenantId"),
    WorkloadCreated.TYPE: NamedInPayload("tenantId"),
    WorkloadScaled.TYPE: NamedInPayload("tenantId"),
    WorkloadDeleted.TYPE: NamedInPayload("tenantId"),
    DeploymentUpdated.TYPE: NamedInPayload("tenantId"),
    ReplicasTerminating.TYPE: NamedInPayload("tenantId"),
    WorkloadPreempted.TYPE: NamedInPayload("tenantId"),
    ReservationPreempted.TYPE: NamedInPayload("tenantId"),
    WorkloadDecided.TYPE: NamedInPayload("tenantId"),
    WorkloadDrained.TYPE: NamedInPayload("tenantId"),
    LedgerReleased.TYPE: SubjectIsReservation(),
    LedgerExtended.TYPE: SubjectIsReservation(),
    LedgerCancelled.TYPE: SubjectIsReservation(),
    LedgerRebound.TYPE: SubjectIsReservation(),
    ReservationCreated.TYPE: NamedInPayload("tenantId"),
    ReservationCancelled.TYPE: SubjectIsReservation(),
    ReservationReleased.TYPE: SubjectIsReservation(),
    ReservationExtended.TYPE: SubjectIsReservation(),
    TenantCreated.TYPE: SubjectIsTenant(),
    TenantDeleted.TYPE: SubjectIsTenant(),
    TenantUpdated.TYPE: SubjectIsTenant(),
    CredentialCreated.TYPE: NamedInPayload("tenantId"),
    CredentialRevoked.TYPE: NamedInPayload("tenantId"),
    PolicyCreated.TYPE: NamedInPayload("tenantId"),
    PolicyUpdated.TYPE: NamedInPayload("tenantId"),
    PolicyDeleted.TYPE: NamedInPayload("tenantId"),
    QuotaSet.TYPE: NamedInPayload("tenantId"),
    PoolOffered.TYPE: NamedInPayload("tenantId"),
    PoolCreated.TYPE: NamedInPayload("ownerTenantId"),
    EndpointCreated.TYPE: NamedInPayload("tenantId"),
    EndpointUpdated.TYPE: NamedInPayload("tenantId"),
    EndpointDeleted.TYPE: NamedInPayload("tenantId"),
    ComponentChanged.TYPE: NamedInPayload("tenantId"),
    PoolUpdated.TYPE: SubjectIsPool(),
    MigLayoutRequested.TYPE: SubjectIsPool(),
    AllocationBound.TYPE: SubjectIsReservation(),
    AllocationReleased.TYPE: SubjectIsReservation(),
    ReplicaExec.TYPE: NamedInPayload("tenantId"),
    ReplicaExecFinished.TYPE: NamedInPayload("tenantId"),
}
"""The event types a tenant may read, and how each one's tenant is found."""

ADMIN_ONLY: frozenset[str] = frozenset(
    {
        PartitionBooked.TYPE,
        PartitionReleased.TYPE,
        PoolDeleted.TYPE,
        NodeInventoryChanged.TYPE,
        ClusterCreated.TYPE,
        ClusterUpdated.TYPE,
        NodeCordoned.TYPE,
        NodeUncordoned.TYPE,
        FleetRegistered.TYPE,
        PriceSet.TYPE,
        DeviceClassCreated.TYPE,
        PriorityClassCreated.TYPE,
        NodeJoined.TYPE,
        NodeReportRefused.TYPE,
        GpuReleased.TYPE,
        NodeScrubbed.TYPE,
        NodeRebootRequired.TYPE,
        NodeLayoutRefused.TYPE,
        ReplicaReadinessChanged.TYPE,
        NodeMigScheduled.TYPE,
        NodeMigGranted.TYPE,
        NodeMigApplied.TYPE,
        DoctorRun.TYPE,
    }
)
"""The known types only the admin reads (fleet-wide facts; a deleted pool is seen by no tenant).
With `TENANT_AUDIENCE` it covers every type of `events.EVENT_TYPES`: a test holds them to it, so a
new type is a decision, not an accident."""


@dataclass(frozen=True)
class Reader:
    """Who reads the stream: the admin (`tenant_id` None), or a tenant and the pools it sees now."""

    tenant_id: str | None
    pool_ids: frozenset[str] = frozenset()

    @property
    def is_admin(self) -> bool:
        return self.tenant_id is None


def audiences() -> dict[Audience, list[str]]:
    """The types a tenant may read, grouped by how their tenant is found (in table order): what a
    store's filter is made of."""
    grouped: dict[Audience, list[str]] = {}
    for type_, audience in TENANT_AUDIENCE.items():
        grouped.setdefault(audience, []).append(type_)
    return grouped
