"""Usage: `usage.list`, GPU-hours per booking in a period (a tenant sees its own)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.answers import paged
from better_compute.api.auth import PrincipalDep
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.metering.metering import Usage, shown
from better_compute.service.metering import usage
from better_compute.wire.billing import UsageListQuery, UsageRowPublic
from better_compute.wire.common import Page

router = APIRouter(prefix="/v1", tags=["billing"], route_class=StrictQueryRoute)


@router.get("/usage", response_model=Page[UsageRowPublic])
def list_usage(
    q: Annotated[UsageListQuery, Query()], principal: PrincipalDep, store: StoreDep, now: NowDep
) -> Page[UsageRowPublic]:
    found = usage.list_usage(
        store,
        principal,
        tenant_id=q.tenant_id,
        pool_id=q.pool_id,
        since=q.from_,
        until=q.to,
        limit=q.limit,
        after=q.cursor,
        now=now,
    )
    return paged(found, usage_public)


def usage_public(u: Usage) -> UsageRowPublic:
    b = u.booking
    assert u.held.end is not None, "held time always ends"
    return UsageRowPublic(
        booking_id=b.booking_id,
        reservation_id=b.reservation_id,
        tenant_id=b.tenant_id,
        pool_id=b.pool_id,
        atom_id=b.atom_id,
        cls=b.cls,
        gpu_model=b.gpu_model,
        meter=b.meter,
        share=str(b.share),
        start=u.held.start,
        end=u.held.end,
        hours=shown(u.hours),
    )
