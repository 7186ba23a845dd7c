"""Inference endpoints: `endpoints.create|list|get|delete` (SPEC 9)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from better_compute.api.answers import json_answer
from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.convert import endpoint_public, paged
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.tenancy import tenant_scope
from better_compute.service import endpoints
from better_compute.wire.common import Page
from better_compute.wire.endpoints import EndpointCreate, EndpointListQuery, EndpointPublic

router = APIRouter(prefix="/v1", tags=["endpoints"], dependencies=AUTHENTICATED, route_class=StrictQueryRoute)


@router.post("/endpoints", response_model=EndpointPublic, status_code=201)
def create_endpoint(body: EndpointCreate, principal: PrincipalDep, store: StoreDep, now: NowDep) -> Response:
    raw = body.model_dump(by_alias=True, exclude_none=True)
    tenant = tenant_scope(principal, body.tenant_id)
    if tenant is not None:
        raw["tenantId"] = tenant
    return json_answer(endpoint_public(endpoints.create(store, principal, raw, now)), 201)


@router.get("/endpoints", response_model=Page[EndpointPublic])
def list_endpoints(
    q: Annotated[EndpointListQuery, Query()], principal: PrincipalDep, store: StoreDep, now: NowDep
) -> Page[EndpointPublic]:
    found = endpoints.list_endpoints(
        store, principal, now, tenant_id=q.tenant_id, limit=q.limit, after=q.cursor
    )
    return paged(found, endpoint_public)


@router.get("/endpoints/{name}", response_model=EndpointPublic)
def get_endpoint(name: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> EndpointPublic:
    return endpoint_public(endpoints.get(store, principal, name, now))


@router.delete("/endpoints/{name}", response_model=EndpointPublic)
def delete_endpoint(name: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> EndpointPublic:
    return endpoint_public(endpoints.delete(store, principal, name, now))
