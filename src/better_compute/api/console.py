"""The web console (SPEC 10) at `/console`: server-rendered pages over the same tokens as the API.

- **Log in** with a token (`POST /console/login`, form field `token`): it is checked as a bearer
  token is, then kept in a cookie marked HttpOnly and SameSite=Strict (Secure over HTTPS), scoped
  to `/console`. Every page checks it again, so a revoked token logs the browser out at once.
- **Forms are CSRF-safe** twice over: SameSite=Strict keeps the cookie off other sites' requests,
  and every form that changes something carries a token derived from the cookie
  (`csrf_for`), which another site can neither read nor forge.
- **A tenant sees only its own**: the pages read through the same services and visibility rules as
  the API (`service.console`); another tenant's pool is NOT_FOUND, shown as a 404 page.
- Pages are sent with a strict Content-Security-Policy (no inline script, nothing from elsewhere)
  and are never cached.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape

from better_compute.api.console_charts import stacked
from better_compute.api.deps import services_of
from better_compute.domain.accounting import Grid, grid_of
from better_compute.domain.billing import month_of
from better_compute.domain.console import STATES
from better_compute.domain.credentials import Principal, bearer_token
from better_compute.domain.doctor import Finding
from better_compute.domain.errors import DomainError, NotFound, Unauthenticated
from better_compute.domain.events import EVENT_TYPES
from better_compute.domain.metering import shown
from better_compute.domain.tenancy import check_ref
from better_compute.domain.timewin import Window
from better_compute.domain.workloads import parse_workload
from better_compute.service import console, credentials, doctor, events, placement, reservations, workloads
from better_compute.web import STATIC, TEMPLATES

COOKIE = "bc_console"
PREFIX = "/console"
PAGES = (
    ("fleet", "Fleet"),
    ("bookings", "Bookings"),
    ("usage", "Usage"),
    ("reserve", "Reserve"),
    ("placement", "Placement"),
    ("endpoints", "Endpoints"),
    ("events", "Doctor and events"),
)
"""The console's pages, in the order the navigation lists them."""
MAX_FORM_BYTES = 4096
"""The largest login or logout form read: a token is at most 260 characters."""
DEFAULT_DAYS = 1
MAX_DAYS = 31
"""How far either side of now the bookings timeline reaches by default, and at most."""

HEADERS = {
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none';"
    " form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
"""Sent with every page. `style-src 'unsafe-inline'` allows the `style` attributes that place each
drawn piece (no script runs from them)."""

_env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]))


def csrf_for(token: str) -> str:
    """The form token of a session: a keyed digest of its cookie. Only a page served to the holder
    of the cookie carries it; another site can neither read the cookie nor compute this."""
    return hmac.new(token.encode(), b"better-compute console form", hashlib.sha256).hexdigest()


def _render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    context.setdefault("pages", PAGES)
    context.setdefault("who", None)
    html = _env.get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers=HEADERS)


def _same(sent: str, expected: str) -> bool:
    """Whether a form's token is the session's, in constant time; any text compares (as bytes)."""
    return hmac.compare_digest(sent.encode("utf-8", "replace"), expected.encode())


def _whole_number(text: str) -> bool:
    """ASCII digits only: `"²".isdigit()` is true, but `int("²")` fails."""
    return text.isascii() and text.isdigit()


def _cross_site(request: Request) -> bool:
    """A request another site's page sent: the browser says so (`Sec-Fetch-Site`), or its `Origin`
    is not this server's."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return True
    origin = request.headers.get("origin")
    return origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}"


def _fragment(template: str, **context: Any) -> HTMLResponse:
    """A part of a page, as the page's live script fetches it (`?partial=1`)."""
    return HTMLResponse(_env.get_template(template).render(**context), headers=HEADERS)


def _session(request: Request) -> tuple[Principal, str] | None:
    """The principal behind the console cookie, and the cookie; None when there is none or it is
    no longer good (unknown, revoked, malformed)."""
    token = request.cookies.get(COOKIE)
    if not token:
        return None
    try:
        bearer_token(f"Bearer {token}")
        return credentials.authenticate(services_of(request).store, token), token
    except Unauthenticated:
        return None


def _who(principal: Principal) -> str:
    return "fleet admin" if principal.is_admin else f"tenant {principal.tenant_id}"


def _to_login() -> RedirectResponse:
    response = RedirectResponse(f"{PREFIX}/login", status_code=303)
    response.delete_cookie(COOKIE, path=PREFIX)
    return response


async def _form(request: Request) -> dict[str, str]:
    """A small url-encoded form: its first value per field; an oversized body reads as empty."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return {}
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {k: v[0] for k, v in fields.items() if v}


def _page(session: tuple[Principal, str], name: str, template: str, **context: Any) -> Response:
    """A page for the session the route has checked."""
    principal, token = session
    return _render(template, page=name, who=_who(principal), csrf=csrf_for(token), **context)


def _not_found(request: Request, error: DomainError) -> Response:
    session = _session(request)
    who = _who(session[0]) if session else None
    csrf = csrf_for(session[1]) if session else ""
    return _render("error.html", 404, page="", who=who, csrf=csrf, message=error.message)


def _days(text: str | None) -> int:
    """The timeline's reach either side of now, in days: the default when not a number, held
    within 1 to MAX_DAYS (a page never refuses a range; it shows the nearest it may)."""
    try:
        asked = int(text) if text is not None else DEFAULT_DAYS
    except ValueError:
        asked = DEFAULT_DAYS
    return max(1, min(MAX_DAYS, asked))


HOURLY_DAYS = 2
"""The usage page draws hourly bars for up to this many days, daily bars beyond."""
WORKLOADS_SHOWN = 100
"""Workloads the placement page lists (`workloads list` has the rest)."""
EVENTS_PER_PAGE = 50
MAX_PAYLOAD_SHOWN = 400
"""Characters of an event's payload a row shows (`events.list` has the whole)."""
DOCTOR_SILENT_AFTER = timedelta(minutes=10)
"""How long without a report makes a joined node silent, as `better-compute doctor` defaults."""

CLASSES = ("gpu", "gpu.mig", "gpu.slot")
"""The device classes the reserve form offers."""


def reservation_body(form: Mapping[str, str], principal: Principal) -> dict[str, Any]:
    """The `reservations.create` body the reserve form asks for: what admission then checks, as it
    checks the API's (every field's limits and refusals are admission's own)."""
    device: dict[str, Any] = {"class": form.get("class", "gpu")}
    count = form.get("count", "1").strip()
    device["count"] = int(count) if _whole_number(count) else count
    profile = form.get("profile", "").strip()
    if profile:
        device["selector"] = {"matchExpressions": [{"key": "migProfile", "op": "In", "values": [profile]}]}
    body: dict[str, Any] = {
        "poolId": form.get("pool", ""),
        "duration": form.get("duration", "").strip(),
        "devices": [device],
    }
    start = form.get("start", "").strip()
    if start:
        body["start"] = start
    tenant = form.get("tenant", "").strip()
    if principal.is_admin and tenant:
        body["tenantId"] = tenant
    return body


_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
STATE_ORDER = ("booked", "changing", "unhealthy", "cordoned", "free")
"""The capacity chart's stack, bottom up: use first, idle last."""


def _month(text: str | None, now: datetime) -> Window:
    """The calendar month (UTC) `YYYY-MM` names; this month when it names none."""
    found = _MONTH.match(text or "")
    if found and 1 <= int(found[2]) <= 12 and 1970 <= int(found[1]) <= 9998:
        return month_of(datetime(int(found[1]), int(found[2]), 1, tzinfo=UTC))
    return month_of(now)


def _usage(
    request: Request, session: tuple[Principal, str], days: str | None, tenant: str | None, month: str | None
) -> console.UsagePage:
    services = services_of(request)
    now = services.clock()
    reach = _days(days)
    if reach <= HOURLY_DAYS:  # hourly bars, up to the end of this hour
        end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    else:  # daily bars, each a calendar day (UTC), up to the end of today
        end = now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    grid = grid_of(end - timedelta(days=reach), end, "1h" if reach <= HOURLY_DAYS else "1d")
    return console.usage(services.store, session[0], grid, now, bill_tenant=tenant, month=_month(month, now))


def _label(window: Window, grid: Grid) -> str:
    return window.start.strftime("%H:%M" if grid.size < timedelta(days=1) else "%m-%d")


def _whole(text: str | None) -> int | str:
    """A form's whole number, or its text as typed, for the parser to refuse by name."""
    value = (text or "1").strip()
    return int(value) if _whole_number(value) else value


def install(app: FastAPI) -> None:
    """Add the console's routes and static files to `app`."""
    app.mount(f"{PREFIX}/static", StaticFiles(directory=STATIC), name="console-static")

    @app.get(PREFIX, include_in_schema=False)
    def console_root(request: Request) -> Response:
        target = "fleet" if _session(request) else "login"
        return RedirectResponse(f"{PREFIX}/{target}", status_code=303)

    @app.get(f"{PREFIX}/login", include_in_schema=False)
    def login_page(request: Request) -> Response:
        if _session(request) is not None:
            return RedirectResponse(f"{PREFIX}/fleet", status_code=303)
        return _render("login.html", page="login")

    @app.post(f"{PREFIX}/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        if _cross_site(request):  # another site logging the browser in under a token of its choosing
            return _render(
                "login.html", 403, page="login", error="Not logged in: this form is not from this console."
            )
        token = (await _form(request)).get("token", "").strip()
        try:
            bearer_token(f"Bearer {token}")
            credentials.authenticate(services_of(request).store, token)
        except Unauthenticated as refused:
            return _render("login.html", 401, page="login", error=f"Not logged in: {refused.message}.")
        response = RedirectResponse(f"{PREFIX}/fleet", status_code=303)
        response.set_cookie(
            COOKIE,
            token,
            path=PREFIX,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    @app.post(f"{PREFIX}/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        session = _session(request)
        sent = (await _form(request)).get("csrf", "")
        if session is not None and not _same(sent, csrf_for(session[1])):
            return _render("error.html", 403, page="", message="This form is not from this console.")
        return _to_login()

    @app.get(f"{PREFIX}/fleet", include_in_schema=False)
    def fleet_page(request: Request, after: str | None = None) -> Response:
        session = _session(request)
        if session is None:
            return _to_login()
        services = services_of(request)
        page = console.fleet(services.store, session[0], services.clock(), after=after)
        return _page(session, "fleet", "fleet.html", states=STATES, fleet=page)

    @app.get(f"{PREFIX}/bookings", include_in_schema=False)
    def bookings_page(
        request: Request,
        pool: str | None = None,
        days: str | None = None,
        busy: str | None = None,
        after: str | None = None,
        partial: str | None = None,
    ) -> Response:
        session = _session(request)
        if session is None:
            return _to_login()
        reach = _days(days)
        services = services_of(request)
        now = services.clock()
        window = Window(now - timedelta(days=reach), now + timedelta(days=reach))
        try:
            timeline = console.bookings(
                services.store, session[0], pool, window, now, busy_only=busy == "1", after=after
            )
        except NotFound as missing:
            return _not_found(request, missing)
        if partial == "1":
            return _fragment("_timeline.html", timeline=timeline, busy=busy == "1")
        return _page(
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
        session = _session(request)
        if session is None:
            return _to_login()
        page = _usage(request, session, days, tenant, month)
        used_series = sorted({k for _, hours in page.used for k in hours})
        used = stacked(
            [(_label(w, page.grid), {k: float(v) for k, v in hours.items()}) for w, hours in page.used],
            used_series,
        )
        states = stacked(
            [(_label(w, page.grid), {k: float(v) for k, v in h.by_state().items()}) for w, h in page.states],
            STATE_ORDER,
        )
        return _page(
            session,
            "usage",
            "usage.html",
            usage=page,
            used=used,
            states=states,
            days=_days(days),
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
        session = _session(request)
        if session is None:
            return _to_login()
        page = _usage(request, session, "1", tenant, month)
        if page.bill is None:
            return _render("error.html", 404, page="", message="No bill to download.")
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

    def reserve_form(
        request: Request, session: tuple[Principal, str], status: int = 200, **shown: Any
    ) -> Response:
        services = services_of(request)
        pools = console.pool_ids(services.store, session[0])
        tenants = []
        if session[0].is_admin:
            with services.store.read() as tx:
                tenants = [t.id for t in tx.tenants.page(None, None)]
        context = {"pools": pools, "classes": CLASSES, "tenants": tenants, "form": {}, **shown}
        return _render(
            "reserve.html", status, page="reserve", who=_who(session[0]), csrf=csrf_for(session[1]), **context
        )

    @app.get(f"{PREFIX}/reserve", include_in_schema=False)
    def reserve_page(request: Request) -> Response:
        session = _session(request)
        if session is None:
            return _to_login()
        return reserve_form(request, session)

    @app.post(f"{PREFIX}/reserve", include_in_schema=False)
    async def reserve(request: Request) -> Response:
        session = _session(request)
        if session is None:
            return _to_login()
        form = await _form(request)
        if not _same(form.get("csrf", ""), csrf_for(session[1])):
            return _render("error.html", 403, page="", message="This form is not from this console.")
        services = services_of(request)
        body = reservation_body(form, session[0])
        try:
            view = reservations.create(
                services.store, services.index, session[0], body, services.clock(), services.ids.reservation
            )
        except DomainError as refused:
            return reserve_form(request, session, 422, form=form, refused=refused)
        return reserve_form(request, session, 201, form=form, made=view)

    @app.get(f"{PREFIX}/placement", include_in_schema=False)
    def placement_page(
        request: Request,
        project: str | None = None,
        class_: Annotated[str | None, Query(alias="class")] = None,
        devices: str | None = None,
        replicas: str | None = None,
        partial: str | None = None,
    ) -> Response:
        session = _session(request)
        if session is None:
            return _to_login()
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
                "shape": {"deviceClass": class_, "deviceCount": _whole(devices)},
                "replicas": _whole(replicas),
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
            return _fragment("_verdicts.html", **shown)
        listed = workloads.list_workloads(
            services.store, principal, tenant_id=None, limit=WORKLOADS_SHOWN, after=None
        ).items
        return _page(
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
        session = _session(request)
        if session is None:
            return _to_login()
        services = services_of(request)
        drawings = console.endpoints_page(services.store, session[0], services.clock())
        return _page(session, "endpoints", "endpoints.html", drawings=drawings)

    def events_page(
        request: Request,
        session: tuple[Principal, str],
        type_: str | None,
        subject: str | None,
        after: str | None,
        findings: list[Finding] | None = None,
    ) -> Response:
        services = services_of(request)
        error = None
        try:
            found = events.list_events(
                services.store,
                session[0],
                type_=type_ or None,
                subject=subject or None,
                after=after or None,
                limit=EVENTS_PER_PAGE,
            )
            listed, next_after = found.items, found.next_cursor
        except DomainError as refused:
            listed, next_after, error = [], None, refused.message
        return _render(
            "events.html",
            page="events",
            who=_who(session[0]),
            csrf=csrf_for(session[1]),
            is_admin=session[0].is_admin,
            findings=findings,
            types=sorted(EVENT_TYPES),
            type=type_,
            subject=subject,
            events=listed,
            next_after=next_after,
            error=error,
            payload=lambda e: json.dumps(e.event.payload(), sort_keys=True)[:MAX_PAYLOAD_SHOWN],
        )

    @app.get(f"{PREFIX}/events", include_in_schema=False)
    def events_get(
        request: Request,
        type: str | None = None,
        subject: str | None = None,
        after: str | None = None,
    ) -> Response:
        session = _session(request)
        if session is None:
            return _to_login()
        return events_page(request, session, type, subject, after)

    @app.post(f"{PREFIX}/events", include_in_schema=False)
    async def doctor_run(request: Request) -> Response:
        session = _session(request)
        if session is None:
            return _to_login()
        form = await _form(request)
        if not _same(form.get("csrf", ""), csrf_for(session[1])):
            return _render("error.html", 403, page="", message="This form is not from this console.")
        services = services_of(request)
        try:
            findings = doctor.run(services.store, session[0], services.clock(), DOCTOR_SILENT_AFTER)
        except DomainError as refused:
            return _render("error.html", 403, page="", message=refused.message)
        return events_page(request, session, None, None, None, findings)


__all__ = ["COOKIE", "csrf_for", "install", "reservation_body"]
