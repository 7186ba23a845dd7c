"""Tenants: `tenants.create`, `tenants.update` and `tenants.delete` (admin), `tenants.list` (a
tenant token sees only itself)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.answers import paged
from better_compute.api.auth import PrincipalDep
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.tenancy.records import Tenant
from better_compute.service.tenancy import tenants
from better_compute.wire.common import Page
from better_compute.wire.tenants import TenantCreate, TenantListQuery, TenantPublic, TenantUpdate

router = APIRouter(prefix="/v1", tags=["tenants"], route_class=StrictQueryRoute)


@router.post("/tenants", response_model=TenantPublic, status_code=201)
def create_tenant(body: TenantCreate, principal: PrincipalDep, store: StoreDep, now: NowDep) -> TenantPublic:
    return tenant_public(tenants.create(store, principal, body.id, body.name, now))


@router.get("/tenants", response_model=Page[TenantPublic])
def list_tenants(
    q: Annotated[TenantListQuery, Query()], principal: PrincipalDep, store: StoreDep
) -> Page[TenantPublic]:
    return paged(tenants.list_tenants(store, principal, limit=q.limit, after=q.cursor), tenant_public)


@router.patch("/tenants/{id}", response_model=TenantPublic)
def update_tenant(
    id: str, body: TenantUpdate, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> TenantPublic:
    """The tenant is the path's: a body naming another is refused, never applied to either."""
    if body.id is not None and body.id != id:
        raise InvalidInput(
            f"the body names tenant {body.id} but the path names {id}; leave id out of the body",
            {"field": "id", "path": id, "body": body.id},
        )
    return tenant_public(tenants.update(store, principal, id, body.name, now))


@router.delete("/tenants/{id}", response_model=TenantPublic)
def delete_tenant(id: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> TenantPublic:
    return tenant_public(tenants.delete(store, principal, id, now))


def tenant_public(t: Tenant) -> TenantPublic:
    return TenantPublic(id=t.id, name=t.name, created_at=t.created_at, deleted_at=t.deleted_at)
