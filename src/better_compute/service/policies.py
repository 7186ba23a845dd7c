"""IAM policies: per-reservation limits the fleet admin sets on a tenant (rules in `domain.iam`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime

from better_compute.domain.credentials import Principal, require_admin
from better_compute.domain.errors import AlreadyExists, NotFound
from better_compute.domain.events import PolicyCreated, PolicyDeleted
from better_compute.domain.iam import Policy, parse_policy
from better_compute.domain.tenancy import (
    check_name,
    check_ref,
    pool_not_found,
    tenant_not_found,
    tenant_scope,
)
from better_compute.service.paging import Listing, page
from better_compute.service.ports import StorePort


def create(
    store: StorePort,
    principal: Principal,
    *,
    name: str,
    tenant_id: str,
    pool_id: str | None,
    limits: Mapping[str, int | None],
    now: datetime,
    new_id: Callable[[], str],
) -> Policy:
    """Create a policy (admin only), named by `new_id()` (`Ids.policy`); a tenant's policy names are
    unique, a reused one is CONFLICT."""
    require_admin(principal, "policies.create")
    policy = parse_policy(
        {
            "name": check_name(name, "name", 128),
            "tenantId": check_ref(tenant_id, "tenantId"),
            "poolId": None if pool_id is None else check_ref(pool_id, "poolId"),
            "limits": {k: v for k, v in limits.items() if v is not None},
        }
    )
    policy = replace(policy, id=new_id(), created_at=now)
    with store.begin() as tx:
        if tx.tenants.hold(policy.tenant_id) is None:
            raise tenant_not_found(policy.tenant_id)
        if policy.pool_id is not None and tx.pools.get(policy.pool_id) is None:
            raise pool_not_found(policy.pool_id)
        if not tx.policies.add(policy):
            raise AlreadyExists(
                f"tenant {policy.tenant_id} already has a policy named {policy.name}",
                {"tenantId": policy.tenant_id, "name": policy.name},
            )
        tx.events.append(PolicyCreated(policy.id, policy.tenant_id, policy.name), now)
    return policy


def list_policies(
    store: StorePort,
    principal: Principal,
    *,
    tenant_id: str | None = None,
    pool_id: str | None = None,
    limit: int | None = None,
    after: str | None = None,
) -> Listing[Policy]:
    """Policies by tenant and pool; a tenant token sees only the policies that apply to it."""
    scope = tenant_scope(principal, tenant_id)
    with store.read() as tx:
        found = tx.policies.find(scope, pool_id)
    return page(found, lambda p: p.id, limit, after)


def delete(store: StorePort, principal: Principal, policy_id: str, now: datetime) -> Policy:
    """Delete a policy (admin only): reservations admitted from then on are no longer limited by it;
    those it admitted stand. Returns the policy as it was."""
    require_admin(principal, "policies.delete")
    with store.begin() as tx:
        gone = tx.policies.remove(check_ref(policy_id, "id"))
        if gone is None:
            raise NotFound(f"policy {policy_id} not found", {"id": policy_id})
        tx.events.append(PolicyDeleted(gone.id, gone.tenant_id, gone.name), now)
    return gone
