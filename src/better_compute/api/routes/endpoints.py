"""Inference endpoints and their components: `endpoints.create|list|get|update|delete` and
`components.create|list|get|scale|delete` (docs/endpoints.md#components)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from better_compute.api.answers import json_answer
from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.convert import component_public, endpoint_public, paged
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.tenancy.tenancy import tenant_scope
from better_compute.service.endpoints import components, endpoints
from better_compute.wire.common import Page
from better_compute.wire.endpoints import (
    ComponentCreate,
    ComponentListQuery,
    ComponentPublic,
    ComponentScale,
    EndpointCreate,
    EndpointListQuery,
    EndpointPublic,
    EndpointUpdate,
)

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


@router.patch("/endpoints/{name}", response_model=EndpointPublic)
def update_endpoint(
    name: str, body: EndpointUpdate, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> EndpointPublic:
    raw = {**body.model_dump(by_alias=True, exclude_none=True), "name": name}
    return endpoint_public(endpoints.update(store, principal, raw, now))


@router.delete("/endpoints/{name}", response_model=EndpointPublic)
def delete_endpoint(name: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> EndpointPublic:
    return endpoint_public(endpoints.delete(store, principal, name, now))


@router.post("/components", response_model=ComponentPublic, status_code=201)
def create_component(
    body: ComponentCreate, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> Response:
    raw = body.model_dump(by_alias=True, exclude_none=True)
    return json_answer(component_public(components.create(store, principal, raw, now)), 201)


@router.get("/components", response_model=Page[ComponentPublic])
def list_components(
    q: Annotated[ComponentListQuery, Query()], principal: PrincipalDep, store: StoreDep
) -> Page[ComponentPublic]:
    found = components.list_components(
        store, principal, endpoint_name=q.endpoint_name, limit=q.limit, after=q.cursor
    )
    return paged(found, component_public)


@router.get("/components/{name}", response_model=ComponentPublic)
def get_component(name: str, principal: PrincipalDep, store: StoreDep) -> ComponentPublic:
    return component_public(components.get(store, principal, name))


@router.post("/components/{name}/scale", response_model=ComponentPublic)
def scale_component(
    name: str, body: ComponentScale, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> ComponentPublic:
    view = components.scale(
        store,
        principal,
        name,
        body.copies,
        now,
        min_copies=body.min_copies,
        partition_type=body.partition_type,
    )
    return component_public(view)


@router.delete("/components/{name}", response_model=ComponentPublic)
def delete_component(name: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> ComponentPublic:
    return component_public(components.delete(store, principal, name, now))
