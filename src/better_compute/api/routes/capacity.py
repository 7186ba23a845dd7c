"""Capacity reads: `capacity.free`, what a pool could book for a window and when."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.auth import PrincipalDep
from better_compute.api.convert import capacity_free
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.timewin import window_asked
from better_compute.service import capacity
from better_compute.wire.capacity import CapacityFree, CapacityFreeQuery

router = APIRouter(prefix="/v1", tags=["capacity"], route_class=StrictQueryRoute)


@router.get("/capacity/free", response_model=CapacityFree)
def free_capacity(
    q: Annotated[CapacityFreeQuery, Query()], principal: PrincipalDep, store: StoreDep, now: NowDep
) -> CapacityFree:
    window = window_asked(q.from_, q.to, now)
    return capacity_free(capacity.free(store, principal, q.pool, window, cls=q.cls, count=q.count))
