"""The console's pages that act: the reserve form (admission books atoms), and doctor and events
(the admin runs the doctor; anyone reads the events they may). Every form that changes something is
checked against the session's form token."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from better_compute.api.console.inputs import CLASSES, opening_form, reservation_body
from better_compute.api.console.session import (
    PREFIX,
    Session,
    csrf_for,
    read_form,
    render,
    same_token,
    session_of,
    to_login,
    who_of,
)
from better_compute.api.deps import services_of
from better_compute.domain.kernel.errors import DomainError, Unavailable
from better_compute.domain.ops.doctor import Finding
from better_compute.domain.ops.event_types import EVENT_TYPES
from better_compute.service.ledger import reservations
from better_compute.service.ops import console, doctor, events

EVENTS_PER_PAGE = 50
MAX_PAYLOAD_SHOWN = 400
"""Characters of an event's payload a row shows (`events.list` has the whole)."""
DOCTOR_SILENT_AFTER = timedelta(minutes=10)
"""How long without a signed report or spec read makes a joined node silent, as `better-compute
doctor` defaults."""


def install(app: FastAPI) -> None:
    """The reserve form, and the doctor and events page."""

    def reserve_form(request: Request, session: Session, status: int = 200, **shown: Any) -> Response:
        services = services_of(request)
        choices = console.reserve_choices(services.store, session[0])
        tenants = []
        if session[0].is_admin:
            with services.store.read() as tx:
                tenants = [t.id for t in tx.tenants.page(None, None)]
        context = {
            "pools": choices,
            "classes": CLASSES,
            "tenants": tenants,
            "form": opening_form(choices),
            **shown,
        }
        return render(
            "reserve.html",
            status,
            page="reserve",
            who=who_of(session[0]),
            csrf=csrf_for(session[1]),
            **context,
        )

    @app.get(f"{PREFIX}/reserve", include_in_schema=False)
    def reserve_page(request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return to_login()
        return reserve_form(request, session)

    @app.post(f"{PREFIX}/reserve", include_in_schema=False)
    async def reserve(request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return to_login()
        form = await read_form(request)
        if not same_token(form.get("csrf", ""), csrf_for(session[1])):
            return render("error.html", 403, page="", message="This form is not from this console.")
        services = services_of(request)
        body = reservation_body(form, session[0])
        try:
            view = reservations.create(
                services.store,
                services.index,
                session[0],
                body,
                services.clock(),
                services.ids.reservation,
                gradients=services.gradients,
            )
        except DomainError as refused:
            status = 503 if isinstance(refused, Unavailable) else 422
            return reserve_form(request, session, status, form=form, refused=refused)
        return reserve_form(request, session, 201, form=form, made=view)

    def events_page(
        request: Request,
        session: Session,
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
        return render(
            "events.html",
            page="events",
            who=who_of(session[0]),
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
        session = session_of(request)
        if session is None:
            return to_login()
        return events_page(request, session, type, subject, after)

    @app.post(f"{PREFIX}/events", include_in_schema=False)
    async def doctor_run(request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return to_login()
        form = await read_form(request)
        if not same_token(form.get("csrf", ""), csrf_for(session[1])):
            return render("error.html", 403, page="", message="This form is not from this console.")
        services = services_of(request)
        try:
            findings = doctor.run(services.store, session[0], services.clock(), DOCTOR_SILENT_AFTER)
        except DomainError as refused:
            status = 503 if isinstance(refused, Unavailable) else 403
            return render("error.html", status, page="", message=refused.message)
        return events_page(request, session, None, None, None, findings)
