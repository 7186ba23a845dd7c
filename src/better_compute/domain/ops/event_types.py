"""Every event type the log holds, by its stored name: the registry a reader of the log parses with.

Each context owns its events (`domain/<context>/events.py`); this module, in the context above them
all, is the one place that knows them all (the events stream, the console's list of types).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
from better_compute.domain.kernel.events import Event, read_event
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

EVENT_TYPES: dict[str, type[Event]] = {
    cls.TYPE: cls
    for cls in (
        LedgerBooked,
        LedgerReleased,
        LedgerExtended,
        LedgerCancelled,
        LedgerRebound,
        PartitionBooked,
        PartitionReleased,
        ReservationCreated,
        ReservationCancelled,
        ReservationReleased,
        ReservationExtended,
        TenantCreated,
        TenantDeleted,
        TenantUpdated,
        TenantUpdated,
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
        WorkloadDrained,
        PoolCreated,
        PoolUpdated,
        PoolDeleted,
        MigLayoutRequested,
        ClusterCreated,
        ClusterUpdated,
        NodeCordoned,
        NodeUncordoned,
        NodeInventoryChanged,
        NodeJoined,
        NodeReportRefused,
        GpuReleased,
        NodeScrubbed,
        NodeRebootRequired,
        NodeLayoutRefused,
        ReplicaReadinessChanged,
        ReplicaExec,
        ReplicaExecFinished,
        NodeMigScheduled,
        NodeMigGranted,
        NodeMigApplied,
        AllocationBound,
        AllocationReleased,
        FleetRegistered,
        DoctorRun,
    )
}


def parse_event(type_: str, subject: str, payload: Mapping[str, Any] | None) -> Event:
    """The event stored as (`type_`, `subject`, `payload`), as its registered type (an unknown type
    is an `UnknownEvent`; see `domain.kernel.events.read_event`)."""
    return read_event(EVENT_TYPES.get(type_), type_, subject, payload)
