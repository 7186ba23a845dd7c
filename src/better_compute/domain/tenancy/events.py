"""Tenancy's events: tenants, credentials, policies, quotas, a pool offered to a tenant.

Each is a frozen dataclass on `domain.kernel.events.Event`; `domain.ops.event_types` registers
every context's types, for reading the log back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from better_compute.domain.kernel.events import Event


@dataclass(frozen=True, slots=True)
class TenantCreated(Event):
    TYPE: ClassVar[str] = "tenant.created"
    name: str


@dataclass(frozen=True, slots=True)
class TenantUpdated(Event):
    """A tenant's display name was changed (`tenants.update`); its id never changes."""

    TYPE: ClassVar[str] = "tenant.updated"
    name: str
    previous_name: str


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
