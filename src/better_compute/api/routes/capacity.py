"""Capacity reads: `capacity.free` (what a pool could book for a window and when),
`capacity.accounting` (every GPU-hour of a range by state) and the rollups `capacity.summary`,
`capacity.timeline` and `capacity.byPool`."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.auth import PrincipalDep
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.kernel.timewin import window_asked
from better_compute.domain.metering.accounting import StateHours, grid_of
from better_compute.domain.metering.metering import shown
from better_compute.domain.metering.rollups import ClassCount, ModelCount, WholeBooked
from better_compute.service.ledger import capacity
from better_compute.service.ledger.capacity import Accounting, PoolFree
from better_compute.wire.capacity import (
    AccountingBucket,
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
    FreeKindPublic,
    ModelCountPublic,
    PoolClassCountPublic,
    StateHoursPublic,
    TimelineBucket,
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


def capacity_free(answer: PoolFree) -> CapacityFree:
    assert answer.window.end is not None
    return CapacityFree(
        pool_id=answer.pool_id,
        from_=answer.window.start,
        to=answer.window.end,
        count=answer.count,
        kinds=[
            FreeKindPublic(
                cls=k.cls,
                gpu_model=k.gpu_model,
                mig_profile=k.mig_profile,
                atoms=k.atoms,
                free=k.free,
                earliest_start=k.earliest_start,
            )
            for k in answer.kinds
        ],
    )


def state_hours(hours: StateHours) -> StateHoursPublic:
    """Hours by state, each rounded for display only (`domain.metering.metering.shown`)."""
    return StateHoursPublic(
        capacity=shown(hours.capacity),
        booked=shown(hours.booked),
        free=shown(hours.free),
        changing=shown(hours.changing),
        unhealthy=shown(hours.unhealthy),
        cordoned=shown(hours.cordoned),
    )


def capacity_accounting(answer: Accounting) -> CapacityAccounting:
    return CapacityAccounting(
        pool_id=answer.pool_id,
        from_=answer.grid.start,
        to=answer.grid.end,
        bucket=answer.grid.bucket,
        buckets=[
            AccountingBucket(from_=span.start, to=span.end, hours=state_hours(hours))
            for span, hours in answer.buckets
        ],
        total=state_hours(answer.total),
    )


def capacity_summary(at: datetime, pool_id: str | None, models: list[ModelCount]) -> CapacitySummary:
    return CapacitySummary(
        at=at,
        pool_id=pool_id,
        models=[
            ModelCountPublic(
                model=m.model, total=m.total, bookable=m.bookable, booked=m.booked, unhealthy=m.unhealthy
            )
            for m in models
        ],
    )


def capacity_by_pool(at: datetime, rows: list[ClassCount]) -> CapacityByPool:
    return CapacityByPool(
        at=at,
        rows=[
            PoolClassCountPublic(
                pool_id=r.pool_id, cls=r.cls, total=r.total, bookable=r.bookable, booked=r.booked
            )
            for r in rows
        ],
    )


def capacity_timeline(
    pool_id: str | None, start: datetime, end: datetime, bucket: str, buckets: list[WholeBooked]
) -> CapacityTimeline:
    return CapacityTimeline(
        pool_id=pool_id,
        from_=start,
        to=end,
        bucket=bucket,
        buckets=[
            TimelineBucket(from_=b.span.start, to=b.span.end, booked=b.peak, hours=shown(b.hours))
            for b in buckets
        ],
    )
