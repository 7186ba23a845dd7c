"""Priority classes: create (admin), list and get (any token)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.answers import paged
from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.placement.priority_classes import PriorityClass
from better_compute.service.placement import priority_classes
from better_compute.wire.common import Page
from better_compute.wire.priority_classes import (
    PriorityClassCreate,
    PriorityClassListQuery,
    PriorityClassPublic,
)

router = APIRouter(
    prefix="/v1", tags=["priority classes"], dependencies=AUTHENTICATED, route_class=StrictQueryRoute
)


@router.get("/priority-classes", response_model=Page[PriorityClassPublic])
def list_priority_classes(
    q: Annotated[PriorityClassListQuery, Query()], principal: PrincipalDep, store: StoreDep
) -> Page[PriorityClassPublic]:
    found = priority_classes.list_classes(store, principal, limit=q.limit, after=q.cursor)
    return paged(found, priority_class_public)


@router.get("/priority-classes/{id}", response_model=PriorityClassPublic)
def get_priority_class(id: str, principal: PrincipalDep, store: StoreDep) -> PriorityClassPublic:
    return priority_class_public(priority_classes.get(store, principal, id))


@router.post("/priority-classes", response_model=PriorityClassPublic, status_code=201)
def create_priority_class(
    body: PriorityClassCreate, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> PriorityClassPublic:
    created = priority_classes.create(store, principal, body.name, body.priority, body.preemptible, now)
    return priority_class_public(created)


def priority_class_public(p: PriorityClass) -> PriorityClassPublic:
    return PriorityClassPublic(
        id=p.name, name=p.name, priority=p.priority, preemptible=p.preemptible, created_at=p.created_at
    )
