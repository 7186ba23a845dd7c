"""Tenants: created by the fleet admin with an id that never changes; each tenant sees only itself."""

from __future__ import annotations

from datetime import datetime

from better_compute.domain.credentials import Principal, require_admin
from better_compute.domain.errors import AlreadyExists
from better_compute.domain.events import TenantCreated
from better_compute.domain.records import Tenant
from better_compute.domain.tenancy import check_name, check_slug, tenant_not_found, tenant_scope
from better_compute.service.paging import Listing, fetch, page
from better_compute.service.ports import StorePort


def create(store: StorePort, principal: Principal, tenant_id: str, name: str, now: datetime) -> Tenant:
    """Create a tenant (admin only); an id already taken is CONFLICT, never a silent rename."""
    require_admin(principal, "tenants.create")
    tenant = Tenant(id=check_slug(tenant_id, "id"), name=check_name(name, "name"), created_at=now)
    with store.begin() as tx:
        if not tx.tenants.add(tenant):
            raise AlreadyExists(f"tenant {tenant_id} already exists", {"tenantId": tenant_id})
        tx.events.append(TenantCreated(tenant_id, tenant.name), now)
    return tenant


def get(store: StorePort, principal: Principal, tenant_id: str) -> Tenant:
    """One tenant; another tenant's is NOT_FOUND to a tenant token (`tenant_scope`)."""
    tenant_scope(principal, tenant_id)
    with store.read() as tx:
        row = tx.tenants.get(tenant_id)
    if row is None:
        raise tenant_not_found(tenant_id)
    return row


def list_tenants(
    store: StorePort, principal: Principal, *, limit: int | None = None, after: str | None = None
) -> Listing[Tenant]:
    """Every tenant for the admin; a tenant token lists only its own tenant (`tenant_scope`)."""
    scope = tenant_scope(principal, None)
    with store.read() as tx:
        if scope is None:
            found = tx.tenants.page(fetch(limit), after)
        else:
            own = tx.tenants.get(scope)
            found = [own] if own is not None else []
    return page(found, lambda t: t.id, limit, after)
