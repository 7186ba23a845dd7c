"""Tenancy's ports: tenants, credentials, quotas and policies, and what tenancy reads of the
contexts above it (pools, workloads, the ledger), each a Protocol of the few methods it calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from better_compute.domain.fleet.records import Cluster, Pool
from better_compute.domain.ledger.records import LiveBooking, Reservation
from better_compute.domain.placement.class_quotas import ClassQuota, HeldAtom
from better_compute.domain.placement.device_classes import DeviceClass
from better_compute.domain.placement.workloads import Workload
from better_compute.domain.tenancy.iam import Policy
from better_compute.domain.tenancy.records import Credential, Quota, Tenant
from better_compute.service.kernel.ports import KernelTx


@dataclass(frozen=True, slots=True)
class TokenOwner:
    """Whom a token hash belongs to, as authentication needs it on every request."""

    credential_id: str
    tenant_id: str | None
    is_admin: bool
    live: bool


class TenantRepo(Protocol):
    """Tenants; every read but `any_state` sees only those not deleted."""

    def get(self, tenant_id: str) -> Tenant | None: ...

    def any_state(self, tenant_id: str) -> Tenant | None:
        """The tenant, deleted or not."""
        ...

    def hold(self, tenant_id: str) -> Tenant | None:
        """The tenant, kept from `tenants.delete` until the transaction ends (a write that gives the
        tenant something reads it so)."""
        ...

    def lock(self, tenant_id: str) -> Tenant | None:
        """The tenant, locked against every `hold` until the transaction ends (`tenants.delete`)."""
        ...

    def mark_deleted(self, tenant_id: str, at: datetime) -> None: ...

    def rename(self, tenant_id: str, name: str) -> Tenant | None:
        """Give the tenant, not deleted, a new display name; the tenant as it was before (None: no
        such tenant, nothing written). The row's write lock is held until the transaction ends."""
        ...

    def page(self, limit: int | None, after: str | None) -> list[Tenant]: ...

    def add(self, tenant: Tenant) -> bool:
        """Insert the tenant; False when its id is taken (nothing written then)."""
        ...

    def put(self, tenants: Sequence[Tenant]) -> None:
        """Create these tenants or rename them; an existing tenant keeps its creation time."""
        ...


class CredentialRepo(Protocol):
    def get(self, credential_id: str) -> Credential | None: ...

    def owner_of(self, token_hash: str) -> TokenOwner | None:
        """Whom the token with this hash stands for; on every request, so one fixed statement."""
        ...

    def live_admins(self) -> list[Credential]: ...

    def of_tenant(self, tenant_id: str | None) -> list[Credential]:
        """A tenant's credentials, or every credential when `tenant_id` is None."""
        ...

    def add(self, credential: Credential) -> bool: ...

    def revoke(self, credential_id: str, at: datetime) -> bool:
        """Mark the credential revoked unless it already was; True when this call revoked it."""
        ...


class QuotaRepo(Protocol):
    def find(self, tenant_id: str | None, pool_id: str | None) -> list[Quota]:
        """Quota rows, by tenant and pool when given, in (tenant, pool, class) order."""
        ...

    def put(self, quotas: Sequence[Quota]) -> None:
        """Create or replace these rows."""
        ...

    def remove_tenant(self, tenant_id: str) -> int:
        """Delete every row of the tenant; how many there were."""
        ...


class PolicyRepo(Protocol):
    def find(
        self,
        tenant_id: str | None,
        pool_id: str | None,
        *,
        subject_type: str | None = None,
        subject_id: str | None = None,
        with_clusters: bool = False,
    ) -> list[Policy]:
        """Policies by id, filtered by each argument given: the tenant's (and, `with_clusters`, the
        clusters' policies besides, which apply to every tenant), in a pool, on a subject."""
        ...

    def get(self, policy_id: str) -> Policy | None: ...

    def for_placement(self, tenant_id: str, workload_id: str | None) -> list[Policy]:
        """In one read: the policies on the tenant, on the workload (when given) and on every cluster."""
        ...

    def add(self, policy: Policy) -> bool:
        """Insert the policy; False when its tenant (or, a cluster's policy, its cluster) already has
        one of that name."""
        ...

    def replace(self, policy: Policy, generation: int) -> bool:
        """Write the policy's limits, constraints and generation if it is still at `generation`;
        False when it is not (or is gone)."""
        ...

    def remove(self, policy_id: str) -> Policy | None:
        """Delete the policy and return it as it was; None when no policy has the id."""
        ...


class PoolLookup(Protocol):
    """What tenancy reads of pools (`service.fleet.ports.PoolRepo`): a quota or policy names one."""

    def get(self, pool_id: str) -> Pool | None: ...

    def all(self) -> list[Pool]: ...


class ClusterLookup(Protocol):
    """What tenancy reads of clusters (`service.fleet.ports.ClusterRepo`): a policy may be on one."""

    def get(self, cluster_id: str) -> Cluster | None: ...


class ClassQuotaRows(Protocol):
    """What tenancy reads and removes of device-class quota rows
    (`service.placement.ports.ClassQuotaRepo`)."""

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

    def remove_tenant(self, tenant_id: str) -> int:
        """Delete every device-class row of the tenant; how many there were."""
        ...


class DeviceClassLookup(Protocol):
    """What tenancy reads of device classes (`service.placement.ports.DeviceClassRepo`)."""

    def get(self, name: str) -> DeviceClass | None: ...


class WorkloadLookup(Protocol):
    """What tenancy reads of workloads (`service.placement.ports.WorkloadRepo`): a policy may be on one."""

    def get(self, workload_id: str) -> Workload | None: ...

    def named(self, name: str, tenant_id: str | None, limit: int) -> list[Workload]: ...


class LiveBookings(Protocol):
    """What tenancy reads of the ledger (`service.ledger.ports.LedgerPort`): what a tenant holds against its
    quota."""

    def live_bookings(self, since: datetime) -> list[LiveBooking]:
        """Live bookings that end after `since` (or never)."""
        ...


class TenantReservations(Protocol):
    """What tenancy asks of reservations (`service.ledger.ports.ReservationRepo`): a tenant's deletion locks
    its quota and looks for what it still holds."""

    def lock(self, key: str) -> None:
        """Serialise writers on `key` until the transaction ends (SQLite serialises every writer)."""
        ...

    def live_of_tenant(self, tenant_id: str, now: datetime, limit: int) -> list[Reservation]:
        """The tenant's reservations not over at `now` (scheduled, or active and not yet ended),
        oldest first, at most `limit`."""
        ...


class HeldAtoms(Protocol):
    """What tenancy reads of atoms (`service.fleet.ports.AtomRepo`): what tenants hold, for their quotas."""

    def held_at(self, tenant_ids: Sequence[str] | None, at: datetime) -> list[HeldAtom]:
        """The atoms these tenants (every tenant when None) hold at `at`: one per live booking of
        theirs that covers the instant, reservations and every other allocation alike, with the
        cluster of the atom's node."""
        ...


class TenancyTx(KernelTx, Protocol):
    """The slice of a transaction tenancy's use cases use: its own repositories, and the few reads of
    pools, workloads and the ledger its rules need."""

    @property
    def tenants(self) -> TenantRepo: ...

    @property
    def credentials(self) -> CredentialRepo: ...

    @property
    def quotas(self) -> QuotaRepo: ...

    @property
    def policies(self) -> PolicyRepo: ...

    @property
    def pools(self) -> PoolLookup: ...

    @property
    def clusters(self) -> ClusterLookup: ...

    @property
    def class_quotas(self) -> ClassQuotaRows: ...

    @property
    def device_classes(self) -> DeviceClassLookup: ...

    @property
    def workloads(self) -> WorkloadLookup: ...

    @property
    def ledger(self) -> LiveBookings: ...

    @property
    def reservations(self) -> TenantReservations: ...

    @property
    def atoms(self) -> HeldAtoms: ...
