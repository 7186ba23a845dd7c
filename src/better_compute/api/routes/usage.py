"""Usage: `usage.list`, GPU-hours per booking in a period (a tenant sees its own); `usage.report`,
every tenant's month in one table (admin)."""

from __future__ import annotations

from fractions import Fraction
from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.answers import paged
from better_compute.api.auth import PrincipalDep
from better_compute.api.deps import NowDep, ServicesDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.metering.metering import Usage, shown
from better_compute.domain.metering.report import UsageReport, total_cost
from better_compute.service.metering import report, usage
from better_compute.wire.billing import (
    BillLinePublic,
    UsageListQuery,
    UsageReportPublic,
    UsageReportQuery,
    UsageReportTenantPublic,
    UsageRowPublic,
)
from better_compute.wire.common import Page

router = APIRouter(prefix="/v1", tags=["billing"], route_class=StrictQueryRoute)


@router.get("/usage", response_model=Page[UsageRowPublic])
def list_usage(
    q: Annotated[UsageListQuery, Query()],
    principal: PrincipalDep,
    store: StoreDep,
    now: NowDep,
    services: ServicesDep,
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
    if not q.slurm_job_ids:
        return paged(found, usage_public)
    jobs = services.slurm_job_ids.job_ids(sorted({u.booking.reservation_id for u in found.items}))
    return paged(
        found,
        lambda u: usage_public(u).model_copy(update={"slurm_job_id": jobs.get(u.booking.reservation_id)}),
    )


@router.get("/usage/report", response_model=UsageReportPublic)
def usage_report(
    q: Annotated[UsageReportQuery, Query()], principal: PrincipalDep, store: StoreDep, now: NowDep
) -> UsageReportPublic:
    """Every tenant's GPU-hours, share and cost for one calendar month (admin)."""
    return report_public(report.report(store, principal, q.month, now))


def _share(value: Fraction | None) -> str | None:
    return None if value is None else shown(value)


def report_public(r: UsageReport) -> UsageReportPublic:
    assert r.period.end is not None, "a month ends"
    cost = total_cost(r)
    tenants = []
    for row in r.tenants:
        bill = row.bill
        currencies = {line.currency for line in bill.lines}
        tenants.append(
            UsageReportTenantPublic(
                tenant_id=bill.tenant_id,
                hours=shown(row.hours),
                bookings=row.bookings,
                share_of_fleet=_share(row.share_of_fleet),
                share_of_use=_share(row.share_of_use),
                lines=[
                    BillLinePublic(
                        meter=line.meter,
                        hours=shown(line.hours),
                        amount=None if line.amount is None else str(line.amount),
                        currency=line.currency,
                    )
                    for line in bill.lines
                ],
                total=None if bill.total is None else str(bill.total),
                currency=next(iter(currencies)) if bill.total is not None and len(currencies) == 1 else None,
            )
        )
    return UsageReportPublic.model_validate(
        {
            "month": r.period.start.strftime("%Y-%m"),
            "from": r.period.start,
            "to": r.period.end,
            "capacityHours": shown(r.capacity_hours),
            "usedHours": shown(r.used_hours),
            "tenants": [t.model_dump(by_alias=True) for t in tenants],
            "total": None if cost is None else str(cost[0]),
            "currency": None if cost is None else cost[1],
        }
    )


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
