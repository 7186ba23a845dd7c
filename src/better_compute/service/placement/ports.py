"""Placement's ports: workloads, device and priority classes, device-class quotas."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from better_compute.domain.kernel.containers import ContainerSpec
from better_compute.domain.kernel.events import Event
from better_compute.domain.placement.class_quotas import ClassQuota
from better_compute.domain.placement.device_classes import DeviceClass
from better_compute.domain.placement.priority_classes import PriorityClass
from better_compute.domain.placement.records import Operation
from better_compute.domain.placement.workloads import Deployment, RunningReplica, Terminating, Workload
from better_compute.service.gate.ports import GateTx
from better_compute.service.metering.ports import MeteringTx


class ClassQuotaRepo(Protocol):
    def find(
        self,
        tenant_id: str | None = None,
        device_class: str | None = None,
        scope: str | None = None,
        cluster_id: str | None = None,
    ) -> list[ClassQuota]:
        """Device-class rows, filtered by what is given (a fleet row's cluster is None, stored as
        ''), in (tenant, device class, scope, cluster) order."""
        ...

    def put(self, row: ClassQuota) -> None:
        """Create or replace the row of its (tenant, device class, scope, cluster)."""
        ...

    def remove_tenant(self, tenant_id: str) -> int:
        """Delete every device-class row of the tenant; how many there were."""
        ...


class DeviceClassRepo(Protocol):
    def get(self, name: str) -> DeviceClass | None: ...

    def all(self) -> list[DeviceClass]:
        """Every device class, by name."""
        ...

    def add(self, item: DeviceClass) -> bool:
        """Create the class; False when its name is taken (nothing is written then)."""
        ...


class WorkloadRepo(Protocol):
    """Workloads, their deployments (one per cluster) and replicas, and operations."""

    def add(self, w: Workload) -> bool:
        """Insert a new workload; False when the tenant already has one of that name."""
        ...

    def create(self, w: Workload, event: Event, at: datetime) -> bool:
        """Insert a new workload and its creation event; False (nothing written) when the tenant
        already has one of that name."""
        ...

    def record_placement(
        self,
        w: Workload,
        generation: int,
        written: Sequence[tuple[Deployment, bool]],
        added: Sequence[tuple[str, int, str]],
        events: Sequence[Event],
        now: datetime,
    ) -> bool:
        """Write a placement's outcome at once (see `SqlWorkloads.record_placement`); False, with
        nothing written, when the workload's generation moved."""
        ...

    def get(self, workload_id: str) -> Workload | None: ...

    def many(self, workload_ids: Sequence[str]) -> list[Workload]:
        """The workloads of these ids that exist, by id."""
        ...

    def by_name(self, tenant_id: str, name: str) -> Workload | None: ...

    def named(self, name: str, tenant_id: str | None, limit: int) -> list[Workload]: ...

    def page(self, tenant_id: str | None, limit: int | None, after: str | None) -> list[Workload]: ...

    def unplaced(self, limit: int) -> list[Workload]: ...

    def update(self, w: Workload, generation: int) -> bool:
        """Compare-and-set on `generation`; True when written."""
        ...

    def remove(self, workload_id: str) -> None: ...

    def deployments_of(self, workload_ids: Sequence[str]) -> dict[str, list[Deployment]]: ...

    def put_deployment(self, d: Deployment, *, new: bool = False) -> None: ...

    def remove_deployment(self, deployment_id: str) -> None: ...

    def pending_workloads(self, limit: int) -> list[str]: ...

    def replicas_of(self, deployment_ids: Sequence[str]) -> dict[str, list[tuple[int, str]]]: ...

    def awaiting(self, workload_id: str) -> set[str]:
        """Clusters where replicas this workload's placement evicted still terminate."""
        ...

    def running(self, allocation_ids: Sequence[str]) -> list[RunningReplica]:
        """The replicas among `allocation_ids`, with whose they are (other allocations left out)."""
        ...

    def add_replicas(self, deployment_id: str, items: Sequence[tuple[int, str]], now: datetime) -> None: ...

    def remove_replicas(self, deployment_id: str, indexes: Sequence[int]) -> None: ...

    def add_terminating(self, items: Sequence[Terminating]) -> None: ...

    def terminating_of(self, workload_ids: Sequence[str]) -> list[Terminating]: ...

    def terminating_since(self, at: datetime, limit: int) -> list[Terminating]: ...

    def terminating_among(self, allocation_ids: Sequence[str]) -> set[str]: ...

    def containers_of(self, allocation_ids: Sequence[str]) -> dict[str, ContainerSpec]:
        """What each of these replicas runs, by allocation id (those whose workload names a
        container; other allocations are left out)."""
        ...

    def end_terminating(self, allocation_id: str) -> Terminating | None: ...

    def add_operation(self, op: Operation) -> None: ...

    def operation(self, operation_id: str) -> Operation | None: ...


class PriorityClassRepo(Protocol):
    def get(self, name: str) -> PriorityClass | None: ...

    def all(self) -> list[PriorityClass]:
        """Every priority class, by name."""
        ...

    def add(self, item: PriorityClass) -> bool:
        """Create the class; False when its name is taken (nothing is written then)."""
        ...


class PlacementTx(GateTx, MeteringTx, Protocol):
    """The slice of a transaction placement's use cases use: the gate's, metering's, and placement's
    own repositories."""

    @property
    def class_quotas(self) -> ClassQuotaRepo: ...

    @property
    def device_classes(self) -> DeviceClassRepo: ...

    @property
    def priority_classes(self) -> PriorityClassRepo: ...

    @property
    def workloads(self) -> WorkloadRepo: ...
