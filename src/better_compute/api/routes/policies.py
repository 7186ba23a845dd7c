"""Policies: `policies.create`, `policies.update` and `policies.delete` (admin); `policies.list` and
`policies.get` (a tenant sees its own policies and the clusters')."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from better_compute.api.answers import paged
from better_compute.api.auth import PrincipalDep
from better_compute.api.deps import IdsDep, NowDep, StoreDep
from better_compute.api.path_ids import path_id
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.tenancy.iam import Policy
from better_compute.service.tenancy import policies
from better_compute.wire.common import Page
from better_compute.wire.policies import (
    CONSTRAINT_FIELDS,
    PolicyConstraints,
    PolicyCreate,
    PolicyLimits,
    PolicyListQuery,
    PolicyPublic,
    PolicyUpdate,
)

router = APIRouter(prefix="/v1", tags=["policies"], route_class=StrictQueryRoute)


def _constraints(body: PolicyConstraints, *, given_only: bool) -> dict[str, Any]:
    """The constraints a request gives, by their wire names: those set (null included, to remove
    one: `policies.update`), or those with a value (`policies.create`)."""
    fields = CONSTRAINT_FIELDS & body.model_fields_set if given_only else CONSTRAINT_FIELDS
    return body.model_dump(by_alias=True, include=set(fields), exclude_none=not given_only)


@router.post("/policies", response_model=PolicyPublic, status_code=201)
def create_policy(
    body: PolicyCreate, principal: PrincipalDep, store: StoreDep, now: NowDep, ids: IdsDep
) -> PolicyPublic:
    row = policies.create(
        store,
        principal,
        name=body.name,
        tenant_id=body.tenant_id,
        pool_id=body.pool_id,
        limits=None if body.limits is None else body.limits.model_dump(by_alias=True),
        subject_type=body.subject_type,
        subject_id=body.subject_id,
        constraints=_constraints(body, given_only=False),
        now=now,
        new_id=ids.policy,
    )
    return policy_public(row)


@router.get("/policies", response_model=Page[PolicyPublic])
def list_policies(
    q: Annotated[PolicyListQuery, Query()], principal: PrincipalDep, store: StoreDep
) -> Page[PolicyPublic]:
    found = policies.list_policies(
        store,
        principal,
        tenant_id=q.tenant_id,
        pool_id=q.pool_id,
        subject_type=q.subject_type,
        subject=q.subject,
        limit=q.limit,
        after=q.cursor,
    )
    return paged(found, policy_public)


@router.get("/policies/{id}", response_model=PolicyPublic)
def get_policy(id: str, principal: PrincipalDep, store: StoreDep) -> PolicyPublic:
    return policy_public(policies.get(store, principal, id))


@router.patch("/policies/{id}", response_model=PolicyPublic)
def update_policy(
    id: str, body: PolicyUpdate, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> PolicyPublic:
    id = path_id(id, body.id)
    changes = _constraints(body, given_only=True)
    if "limits" in body.model_fields_set:
        changes["limits"] = None if body.limits is None else body.limits.model_dump(by_alias=True)
    row = policies.update(store, principal, id, changes=changes, generation=body.generation, now=now)
    return policy_public(row)


@router.delete("/policies/{id}", response_model=PolicyPublic)
def delete_policy(id: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> PolicyPublic:
    return policy_public(policies.delete(store, principal, id, now))


def policy_public(p: Policy) -> PolicyPublic:
    assert p.created_at is not None, "a stored policy has its creation time"
    c = p.constraints
    return PolicyPublic(
        id=p.id,
        name=p.name,
        tenant_id=p.tenant_id,
        pool_id=p.pool_id,
        subject_type=p.subject_type,
        subject_id=p.subject_id,
        limits=PolicyLimits(gpu_count=p.gpu_count, gpu_slices=p.gpu_slices),
        allowed_regions=list(c.allowed_regions),
        allowed_residencies=list(c.allowed_residencies),
        allowed_device_classes=list(c.allowed_device_classes),
        allowed_clusters=list(c.allowed_clusters),
        denied_clusters=list(c.denied_clusters),
        cost_ceiling=c.cost_ceiling,
        generation=p.generation,
        created_at=p.created_at,
    )
