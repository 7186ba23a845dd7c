"""Tenants: created by the fleet admin with an id that never changes; each tenant sees only itself.

A deleted tenant keeps its row (its reservations, bills and events name it) and its id, which no
other tenant may take; every read treats it as not found.
"""

from __future__ import annotations

from datetime import datetime

from better_compute.domain.kernel.errors import ConcurrentChange
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.domain.tenancy.events import PolicyDeleted, TenantCreated, TenantDeleted, TenantUpdated
from better_compute.domain.tenancy.records import Tenant
from better_compute.domain.tenancy.tenancy import (
    check_name,
    check_ref,
    check_slug,
    check_tenant_deletable,
    tenant_id_taken,
    tenant_not_found,
    tenant_scope,
)
from better_compute.service.kernel.paging import Listing, fetch, page
from better_compute.service.kernel.ports import StorePort
from better_compute.service.tenancy.ports import TenancyTx
from better_compute.service.tenancy.quotas import quota_lock


def create(
    store: StorePort[TenancyTx], principal: Principal, tenant_id: str, name: str, now: datetime
) -> Tenant:
    """Create a tenant (admin only); an id already taken, even by a deleted tenant, is CONFLICT,
    never a silent rename."""
    require_admin(principal, "tenants.create")
    tenant = Tenant(id=check_slug(tenant_id, "id"), name=check_name(name, "name"), created_at=now)
    with store.begin() as tx:
        if not tx.tenants.add(tenant):
            taken = tx.tenants.any_state(tenant_id)
            raise tenant_id_taken(tenant_id, deleted=taken is not None and taken.deleted_at is not None)
        tx.events.append(TenantCreated(tenant_id, tenant.name), now)
    return tenant


def update(
    store: StorePort[TenancyTx], principal: Principal, tenant_id: str, name: str, now: datetime
) -> Tenant:
    """Change a tenant's display name (admin only): the one thing of a tenant that may change (its id
    is what every reservation, quota, bill and event names). `tenant.updated` is logged with the
    name before and after; the same name again changes nothing and logs nothing. A deleted tenant is
    NOT_FOUND."""
    require_admin(principal, "tenants.update")
    check_ref(tenant_id, "id")
    new_name = check_name(name, "name")
    with store.begin() as tx:
        before = tx.tenants.rename(tenant_id, new_name)
        if before is None:
            raise tenant_not_found(tenant_id)
        if before.name != new_name:
            tx.events.append(TenantUpdated(tenant_id, new_name, before.name), now)
    return Tenant(id=before.id, name=new_name, created_at=before.created_at)


def delete(store: StorePort[TenancyTx], principal: Principal, tenant_id: str, now: datetime) -> Tenant:
    """Delete a tenant (admin only) that owns no pool and holds no reservation not over
    (`tenancy.check_tenant_deletable`): its credentials are revoked at once, its quota rows (its
    offers too, and its device-class rows) and policies removed. Answers the tenant with `deleted_at` set."""
    require_admin(principal, "tenants.delete")
    check_ref(tenant_id, "id")
    with store.begin() as tx:
        return delete_in(tx, tenant_id, now)


def _quota_pools(tx: TenancyTx, tenant_id: str) -> list[str]:
    return sorted({q.pool_id for q in tx.quotas.find(tenant_id, None)})


def delete_in(tx: TenancyTx, tenant_id: str, now: datetime) -> Tenant:
    """`delete` within an open transaction.

    A reservation for the tenant is admitted under its quota lock in the pool (`quota_lock`), and
    only a pool it has quota rows in can admit one (one it owns stops the delete anyway). So the
    delete takes those locks first: an admission under way commits before the checks read, and a
    later one reads the tenant after this commits and finds it gone. Then the tenant row is locked
    (`TenantRepo.lock`), which every write that gives the tenant something holds
    (`TenantRepo.hold`): a credential, a pool, a policy, a quota row. Locks are taken in that order,
    the admission's own, so neither ever waits for the other in a cycle; a quota row granted in a new
    pool between the two is CONFLICT (retry), not a lock taken out of order."""
    locked = _quota_pools(tx, tenant_id)
    for pool_id in locked:
        tx.reservations.lock(quota_lock(tenant_id, pool_id))
    tenant = tx.tenants.lock(tenant_id)
    if tenant is None:
        raise tenant_not_found(tenant_id)
    if set(_quota_pools(tx, tenant_id)) - set(locked):
        raise ConcurrentChange(
            f"tenant {tenant_id} was given quota in another pool while it was deleted; retry",
            {"tenantId": tenant_id},
        )
    owned = sorted(p.id for p in tx.pools.all() if p.owner_tenant_id == tenant_id)
    live = [r.id for r in tx.reservations.live_of_tenant(tenant_id, now, 21)]
    check_tenant_deletable(tenant_id, owned, live)
    revoked = sum(
        1
        for c in tx.credentials.of_tenant(tenant_id)
        if c.revoked_at is None and tx.credentials.revoke(c.id, now)
    )
    policies = tx.policies.find(tenant_id, None)
    for policy in policies:
        tx.policies.remove(policy.id)
        tx.events.append(PolicyDeleted(policy.id, tenant_id, policy.name), now)
    quotas = tx.quotas.remove_tenant(tenant_id) + tx.class_quotas.remove_tenant(tenant_id)
    tx.tenants.mark_deleted(tenant_id, now)
    tx.events.append(TenantDeleted(tenant_id, revoked, quotas, len(policies)), now)
    return Tenant(id=tenant.id, name=tenant.name, created_at=tenant.created_at, deleted_at=now)


def get(store: StorePort[TenancyTx], principal: Principal, tenant_id: str) -> Tenant:
    """One tenant; another tenant's is NOT_FOUND to a tenant token (`tenant_scope`)."""
    tenant_scope(principal, tenant_id)
    with store.read() as tx:
        row = tx.tenants.get(tenant_id)
    if row is None:
        raise tenant_not_found(tenant_id)
    return row


def list_tenants(
    store: StorePort[TenancyTx], principal: Principal, *, limit: int | None = None, after: str | None = None
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
