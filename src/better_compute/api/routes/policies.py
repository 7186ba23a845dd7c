"""IAM policies: `policies.create` (admin) and `policies.list` (a tenant sees the policies on it)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.auth import PrincipalDep
from better_compute.api.convert import paged, policy_public
from better_compute.api.deps import IdsDep, NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.service import policies
from better_compute.wire.common import Page
from better_compute.wire.policies import PolicyCreate, PolicyListQuery, PolicyPublic

router = APIRouter(prefix="/v1", tags=["policies"], route_class=StrictQueryRoute)


@router.post("/policies", response_model=PolicyPublic, status_code=201)
def create_policy(
    body: PolicyCreate, principal: PrincipalDep, store: StoreDep, now: NowDep, ids: IdsDep
) -> PolicyPublic:
    limits = body.limits.model_dump(by_alias=True)
    row = policies.create(
        store,
        principal,
        name=body.name,
        tenant_id=body.tenant_id,
        pool_id=body.pool_id,
        limits=limits,
        now=now,
        new_id=ids.policy,
    )
    return policy_public(row)


@router.get("/policies", response_model=Page[PolicyPublic])
def list_policies(
    q: Annotated[PolicyListQuery, Query()], principal: PrincipalDep, store: StoreDep
) -> Page[PolicyPublic]:
    found = policies.list_policies(
        store, principal, tenant_id=q.tenant_id, pool_id=q.pool_id, limit=q.limit, after=q.cursor
    )
    return paged(found, policy_public)


@router.delete("/policies/{id}", response_model=PolicyPublic)
def delete_policy(id: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> PolicyPublic:
    return policy_public(policies.delete(store, principal, id, now))
