"""Bills: `bills.get`, a tenant's GPU-hours per meter in a period, priced (a tenant reads its own)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from better_compute.api.auth import PrincipalDep
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.metering.billing import Bill
from better_compute.domain.metering.metering import shown
from better_compute.service.metering import bills
from better_compute.wire.billing import MAX_BOUND_TEXT, BillLinePublic, BillPublic, ShowbackLinePublic

router = APIRouter(prefix="/v1", tags=["billing"], route_class=StrictQueryRoute)

_FROM = "The period's start: a date (2030-01-01, midnight UTC) or an ISO 8601 timestamp with its offset."
_TO = "The period's end (excluded), as `from`; both left out: the current calendar month."


@router.get("/bills/{tenantId}", response_model=BillPublic)
def get_bill(
    tenant_id: Annotated[str, Path(alias="tenantId")],
    principal: PrincipalDep,
    store: StoreDep,
    now: NowDep,
    since: Annotated[
        str | None, Query(alias="from", description=_FROM, json_schema_extra={"maxLength": MAX_BOUND_TEXT})
    ] = None,
    until: Annotated[
        str | None, Query(alias="to", description=_TO, json_schema_extra={"maxLength": MAX_BOUND_TEXT})
    ] = None,
) -> BillPublic:
    return bill_public(bills.get_bill(store, principal, tenant_id, since=since, until=until, now=now))


def bill_public(bill: Bill) -> BillPublic:
    assert bill.period.end is not None, "a period has an end"
    return BillPublic(
        tenant_id=bill.tenant_id,
        from_=bill.period.start,
        to=bill.period.end,
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
        showback=[
            ShowbackLinePublic(
                endpoint=line.endpoint,
                component=line.component,
                gpu_hours=shown(line.gpu_hours),
                amount=None if line.amount is None else str(line.amount),
            )
            for line in bill.showback
        ],
    )
