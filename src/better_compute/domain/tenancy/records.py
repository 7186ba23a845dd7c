"""Tenancy's records: tenants, credentials and quota rows, as storage returns them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Tenant:
    id: str
    name: str
    created_at: datetime
    deleted_at: datetime | None = None
    """When the tenant was deleted (`tenants.delete`); its id is never given to another tenant."""


@dataclass(frozen=True, slots=True)
class Credential:
    """A bearer token's record: only its hash is kept; `tenant_id` is None for a fleet admin's."""

    id: str
    tenant_id: str | None
    name: str
    token_hash: str
    is_admin: bool
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def live(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True, slots=True)
class Quota:
    """How much of one atom class a tenant may hold at once in one pool."""

    tenant_id: str
    pool_id: str
    cls: str
    limit: int
    updated_at: datetime
