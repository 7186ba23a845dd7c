"""Capacity reads: `capacity.free` (what a pool could book for a window and when),
`capacity.accounting` (every GPU-hour of a range by state) and the rollups `capacity.summary`,
`capacity.timeline` and `capacity.byPool`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.auth import PrincipalDep
from better_compute.api.convert import (
    capacity_accounting,
    capacity_by_pool,
    capacity_free,
    capacity_summary,
    capacity_timeline,
)
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.kernel.timewin import window_asked
from better_compute.domain.metering.accounting import grid_of
from better_compute.service.ledger import capacity
from better_compute.wire.capacity import (
    CapacityAccounting,
    CapacityAccountingQuery,
    CapacityByPool,
    CapacityByPoolQuery,
    CapacityFree,
    CapacityFreeQuery,
    CapacitySummary,
    CapacitySummaryQuery,
    CapacityTimeline,
    CapacityTimelineQuery,
)

router = APIRouter(prefix="/v1", tags=["capacity"], route_class=StrictQueryRoute)


@router.get("/capacity/free", response_model=CapacityFree)
def free_capacity(
    q: Annotated[CapacityFreeQuery, Query()], principal: PrincipalDep, store: StoreDep, now: NowDep
) -> CapacityFree:
    window = window_asked(q.from_, q.to, now)
    return capacity_free(capacity.free(store, principal, q.pool, window, cls=q.cls, count=q.count, now=now))


@router.get("/capacity/accounting", response_model=CapacityAccounting)
def capacity_accounting_route(
    q: Annotated[CapacityAccountingQuery, Query()], principal: PrincipalDep, store: StoreDep
) -> CapacityAccounting:
    grid = grid_of(q.from_, q.to, q.bucket)
    return capacity_accounting(capacity.accounting(store, principal, q.pool_id, grid))


@router.get("/capacity/summary", response_model=CapacitySummary)
def capacity_summary_route(
    q: Annotated[CapacitySummaryQuery, Query()], principal: PrincipalDep, store: StoreDep, now: NowDep
) -> CapacitySummary:
    return capacity_summary(now, q.pool_id, capacity.summary(store, principal, q.pool_id, now))


@router.get("/capacity/timeline", response_model=CapacityTimeline)
def capacity_timeline_route(
    q: Annotated[CapacityTimelineQuery, Query()], principal: PrincipalDep, store: StoreDep
) -> CapacityTimeline:
    grid = grid_of(q.from_, q.to, q.bucket)
    booked = capacity.timeline(store, principal, q.pool_id, grid)
    return capacity_timeline(q.pool_id, grid.start, grid.end, grid.bucket, booked)


@router.get("/capacity/by-pool", response_model=CapacityByPool)
def capacity_by_pool_route(
    q: Annotated[CapacityByPoolQuery, Query()], principal: PrincipalDep, store: StoreDep, now: NowDep
) -> CapacityByPool:
    return capacity_by_pool(now, capacity.by_pool(store, principal, q.pool_id, now))
