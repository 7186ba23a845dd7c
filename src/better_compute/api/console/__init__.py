"""The web console at `/console`: server-rendered pages over the same tokens as the API
(docs/console.md). `session` logs in and renders; `pages` show the fleet, bookings, usage,
placement and endpoints; `actions` reserve and run the doctor; `inputs` reads forms and queries;
`charts` draws SVG charts. Templates and static files live in `better_compute.web`."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from better_compute.api.console import actions, pages, session
from better_compute.api.console.inputs import reservation_body
from better_compute.api.console.session import COOKIE, PREFIX, csrf_for
from better_compute.web import STATIC

__all__ = ["COOKIE", "csrf_for", "install", "reservation_body"]


def install(app: FastAPI) -> None:
    """Add the console's routes and static files to `app`."""
    app.mount(f"{PREFIX}/static", StaticFiles(directory=STATIC), name="console-static")
    session.install(app)
    pages.install(app)
    actions.install(app)
