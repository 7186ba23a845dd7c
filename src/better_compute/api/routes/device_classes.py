"""Device classes: create (admin), list and get (any token)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.answers import paged
from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.kernel.selectors import document
from better_compute.domain.placement.device_classes import DeviceClass
from better_compute.service.placement import device_classes
from better_compute.wire.common import Page
from better_compute.wire.device_classes import DeviceClassCreate, DeviceClassListQuery, DeviceClassPublic

router = APIRouter(
    prefix="/v1", tags=["device classes"], dependencies=AUTHENTICATED, route_class=StrictQueryRoute
)


@router.get("/device-classes", response_model=Page[DeviceClassPublic])
def list_device_classes(
    q: Annotated[DeviceClassListQuery, Query()], principal: PrincipalDep, store: StoreDep
) -> Page[DeviceClassPublic]:
    found = device_classes.list_classes(store, principal, limit=q.limit, after=q.cursor)
    return paged(found, device_class_public)


@router.get("/device-classes/{id}", response_model=DeviceClassPublic)
def get_device_class(id: str, principal: PrincipalDep, store: StoreDep) -> DeviceClassPublic:
    return device_class_public(device_classes.get(store, principal, id))


@router.post("/device-classes", response_model=DeviceClassPublic, status_code=201)
def create_device_class(
    body: DeviceClassCreate, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> DeviceClassPublic:
    # The selector goes to the domain as JSON, as a device request's does: one parser reads both.
    selector = None if body.selector is None else body.selector.model_dump(mode="json", by_alias=True)
    created = device_classes.create(store, principal, body.name, body.cls, selector, now)
    return device_class_public(created)


def device_class_public(d: DeviceClass) -> DeviceClassPublic:
    return DeviceClassPublic.model_validate(
        {
            "id": d.name,
            "name": d.name,
            "class": d.cls,
            "selector": document(d.selector),
            "createdAt": d.created_at,
        }
    )
