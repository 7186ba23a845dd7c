"""The console's pages that show things: fleet, bookings, usage (and the bill's CSV), placement
and endpoints. Each reads through `service.ops.console` (and the services the API uses) as the logged-in
caller, so a tenant sees only its own."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import Response

from better_compute.api.console.charts import stacked
from better_compute.api.console.inputs import (
    HOURLY_DAYS,
    MAX_DAYS,
    STATE_ORDER,
    WORKLOADS_SHOWN,
    bucket_label,
    days_of,
    month_named,
    whole,
)
from better_compute.api.console.session import (
    HEADERS,
    PREFIX,
    Session,
    fragment,
    not_found_page,
    render,
    render_page,
    session_of,
    to_login,
)
from better_compute.api.deps import services_of
from better_compute.domain.kernel.errors import DomainError, NotFound
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.accounting import grid_of
from better_compute.domain.metering.metering import shown
from better_compute.domain.ops.console import STATES
from better_compute.domain.placement.commands import parse_workload
from better_compute.domain.tenancy.tenancy import check_ref
from better_compute.service.ops import console
from better_compute.service.placement import placement, workloads

FRAGMENTED = "free capacity fragmented"
"""The fragmentation chart's one series: the share of a pool's free GPU capacity its recorded
request sizes cannot use, in percent."""


def usage_of(
    request: Request, session: Session, days: str | None, tenant: str | None, month: str | None
) -> console.UsagePage:
    services = services_of(request)
    now = services.clock()
    reach = days_of(days)
    if reach <= HOURLY_DAYS:  # hourly bars, up to the end of this hour
        end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    else:  # daily bars, each a calendar day (UTC), up to the end of today
        end = now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    grid = grid_of(end - timedelta(days=reach), end, "1h" if reach <= HOURLY_DAYS else "1d")
    return console.usage(
        services.store, session[0], grid, now, bill_tenant=tenant, month=month_named(month, now)
    )


def install(app: FastAPI) -> None:
    """The pages that show the fleet, its bookings, usage, placement verdicts and endpoints."""

    @app.get(f"{PREFIX}/fleet", include_in_schema=False)
    def fleet_page(request: Request, after: str | None = None) -> Response:
        session = session_of(request)
        if session is None:
            return to_login()
        services = services_of(request)
        page = console.fleet(services.store, session[0], services.clock(), after=after)
        return render_page(session, "fleet", "fleet.html", states=STATES, fleet=page)

    @app.get(f"{PREFIX}/bookings", include_in_schema=False)
    def bookings_page(
        request: Request,
        pool: str | None = None,
        days: str | None = None,
        busy: str | None = None,
        after: str | None = None,
        partial: str | None = None,
    ) -> Response:
        session = session_of(request)
        if session is None:
            return to_login()
        reach = days_of(days)
        services = services_of(request)
        now = services.clock()
        window = Window(now - timedelta(days=reach), now + timedelta(days=reach))
        try:
            timeline = console.bookings(
                services.store, session[0], pool, window, now, busy_only=busy == "1", after=after
            )
        except NotFound as missing:
            return not_found_page(request, missing)
        if partial == "1":
            return fragment("_timeline.html", timeline=timeline, busy=busy == "1")
        return render_page(
            session,
            "bookings",
            "bookings.html",
            timeline=timeline,
            days=reach,
            max_days=MAX_DAYS,
            busy=busy == "1",
            after=after,
        )

    @app.get(f"{PREFIX}/usage", include_in_schema=False)
    def usage_page(
        request: Request,
        days: str | None = None,
        tenant: str | None = None,
        month: str | None = None,
    ) -> Response:
        session = session_of(request)
        if session is None:
            return to_login()
        page = usage_of(request, session, days, tenant, month)
        used_series = sorted({k for _, hours in page.used for k in hours})
        used = stacked(
            [(bucket_label(w, page.grid), {k: float(v) for k, v in hours.items()}) for w, hours in page.used],
            used_series,
        )
        states = stacked(
            [
                (bucket_label(w, page.grid), {k: float(v) for k, v in h.by_state().items()})
                for w, h in page.states
            ],
            STATE_ORDER,
        )
        services = services_of(request)
        # now, per pool: no history of it is stored (Prometheus keeps the gauge's)
        fragmented = stacked(
            [
                (pool, {FRAGMENTED: ratio * 100})
                for pool, ratio in console.pool_fragmentation(
                    services.store, services.index, session[0], services.clock()
                )
            ],
            (FRAGMENTED,),
            "%",
            top=100.0,
        )
        return render_page(
            session,
            "usage",
            "usage.html",
            usage=page,
            used=used,
            states=states,
            fragmented=fragmented,
            days=days_of(days),
            max_days=MAX_DAYS,
            month=page.bill.period.start.strftime("%Y-%m") if page.bill else "",
            shown=shown,
        )

    @app.get(f"{PREFIX}/usage/bill.csv", include_in_schema=False)
    def bill_csv(
        request: Request,
        tenant: str | None = None,
        month: str | None = None,
    ) -> Response:
        session = session_of(request)
        if session is None:
            return to_login()
        page = usage_of(request, session, "1", tenant, month)
        if page.bill is None:
            return render("error.html", 404, page="", message="No bill to download.")
        bill = page.bill
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["tenant", "from", "to", "meter", "gpu_hours", "amount", "currency"])
        for line in bill.lines:
            writer.writerow(
                [
                    bill.tenant_id,
                    bill.period.start.isoformat(),
                    bill.period.end.isoformat() if bill.period.end else "",
                    line.meter,
                    shown(line.hours),
                    "" if line.amount is None else str(line.amount),
                    line.currency or "",
                ]
            )
        if bill.total is not None:
            writer.writerow(
                [bill.tenant_id, "", "", "total", "", str(bill.total), bill.lines[0].currency or ""]
            )
        name = f"bill-{bill.tenant_id}-{bill.period.start.strftime('%Y-%m')}.csv"
        headers = {**HEADERS, "Content-Disposition": f'attachment; filename="{name}"'}
        return Response(out.getvalue(), media_type="text/csv", headers=headers)

    @app.get(f"{PREFIX}/placement", include_in_schema=False)
    def placement_page(
        request: Request,
        project: str | None = None,
        class_: Annotated[str | None, Query(alias="class")] = None,
        devices: str | None = None,
        replicas: str | None = None,
        partial: str | None = None,
    ) -> Response:
        session = session_of(request)
        if session is None:
            return to_login()
        principal = session[0]
        services = services_of(request)
        now = services.clock()
        with services.store.read() as tx:
            classes = sorted(c.name for c in tx.device_classes.all())
            tenants = [t.id for t in tx.tenants.page(None, None)] if principal.is_admin else []
        form = {
            k: v
            for k, v in (
                ("project", project),
                ("class", class_),
                ("devices", devices),
                ("replicas", replicas),
            )
            if v is not None
        }
        shown: dict[str, Any] = {"verdicts": None, "shares": {}, "unplaced": 0}
        if class_ is not None:
            raw = {
                "name": "preview",
                "shape": {"deviceClass": class_, "deviceCount": whole(devices)},
                "replicas": whole(replicas),
            }
            try:
                tenant = principal.tenant_id if not principal.is_admin else (project or "")
                spec = parse_workload(raw, check_ref(tenant, "project"))
                got = placement.preview(services.store, services.index, services.stock, principal, spec, now)
                shown = {
                    "verdicts": got.placement.verdicts,
                    "shares": got.placement.shares,
                    "unplaced": got.placement.unplaced,
                }
            except DomainError as refused:
                shown["refused"] = refused
        if partial == "1":
            return fragment("_verdicts.html", **shown)
        listed = workloads.list_workloads(
            services.store, principal, services.clock(), tenant_id=None, limit=WORKLOADS_SHOWN, after=None
        ).items
        return render_page(
            session,
            "placement",
            "placement.html",
            classes=classes,
            tenants=tenants,
            form=form,
            workloads=listed,
            **shown,
        )

    @app.get(f"{PREFIX}/endpoints", include_in_schema=False)
    def endpoints_page(request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return to_login()
        services = services_of(request)
        drawings = console.endpoints_page(services.store, session[0], services.clock())
        return render_page(session, "endpoints", "endpoints.html", drawings=drawings)
