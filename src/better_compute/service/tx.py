"""The whole transaction: every context's repositories, as the storage's unit of work offers them.

It imports every context, so it lives at the layer's root, beside `services.py`: no context imports
it. Use cases type the slice they use (`service/<context>/ports.py`); what holds the whole store (the
composition root, the services, warmup) types `StorePort[Tx]`.
"""

from __future__ import annotations

from typing import Protocol

from better_compute.service.endpoints.ports import ComponentRepo, EndpointRepo
from better_compute.service.fleet.ports import (
    AtomRepo,
    BindingRepo,
    ClusterRepo,
    GpuRepo,
    GpuStateRepo,
    JoinTokenRepo,
    NodeAgentRepo,
    NodeRepo,
    PoolRepo,
    ReplicaStateRepo,
)
from better_compute.service.gate.ports import GateHooks, MigLayoutRepo
from better_compute.service.kernel.ports import EventLog
from better_compute.service.ledger.ports import LedgerPort, ReservationRepo, SlurmJobRepo
from better_compute.service.metering.ports import PriceRepo, UsageRepo
from better_compute.service.placement.ports import (
    ClassQuotaRepo,
    DeviceClassRepo,
    PriorityClassRepo,
    WorkloadRepo,
)
from better_compute.service.tenancy.ports import CredentialRepo, PolicyRepo, QuotaRepo, TenantRepo


class Tx(Protocol):
    """One open transaction and the repositories bound to it."""

    @property
    def mig_layouts(self) -> MigLayoutRepo: ...

    @property
    def tenants(self) -> TenantRepo: ...

    @property
    def credentials(self) -> CredentialRepo: ...

    @property
    def clusters(self) -> ClusterRepo: ...

    @property
    def nodes(self) -> NodeRepo: ...

    @property
    def join_tokens(self) -> JoinTokenRepo: ...

    @property
    def bindings(self) -> BindingRepo: ...

    @property
    def replica_states(self) -> ReplicaStateRepo: ...

    @property
    def node_agents(self) -> NodeAgentRepo: ...

    @property
    def gpus(self) -> GpuRepo: ...

    @property
    def atoms(self) -> AtomRepo: ...

    @property
    def slurm_jobs(self) -> SlurmJobRepo: ...

    @property
    def gpu_states(self) -> GpuStateRepo: ...

    @property
    def pools(self) -> PoolRepo: ...

    @property
    def quotas(self) -> QuotaRepo: ...

    @property
    def class_quotas(self) -> ClassQuotaRepo: ...

    @property
    def policies(self) -> PolicyRepo: ...

    @property
    def reservations(self) -> ReservationRepo: ...

    @property
    def ledger(self) -> LedgerPort: ...

    @property
    def events(self) -> EventLog: ...

    @property
    def usage(self) -> UsageRepo: ...

    @property
    def prices(self) -> PriceRepo: ...

    @property
    def device_classes(self) -> DeviceClassRepo: ...

    @property
    def priority_classes(self) -> PriorityClassRepo: ...

    @property
    def endpoints(self) -> EndpointRepo: ...

    @property
    def components(self) -> ComponentRepo: ...

    @property
    def workloads(self) -> WorkloadRepo: ...

    @property
    def hooks(self) -> GateHooks:
        """Fleet's and the gate's hooks, bound to this transaction (`service/hooks.py`)."""
        ...
