"""The console's session: the login form, the cookie that keeps the token, the form token that
makes a form CSRF-safe, and how a page is rendered and sent (docs/console.md).

- **Log in** with a token (`POST /console/login`, form field `token`): it is checked as a bearer
  token is, then kept in a cookie marked HttpOnly and SameSite=Strict (Secure over HTTPS), scoped
  to `/console`. Every page checks it again, so a revoked token logs the browser out at once. A
  login form posted from another site is refused.
- **Forms are CSRF-safe** twice over: SameSite=Strict keeps the cookie off other sites' requests,
  and every form that changes something carries a token derived from the cookie (`csrf_for`),
  which another site can neither read nor forge.
- Pages are sent with a strict Content-Security-Policy (scripts and styles from this server only)
  and are never cached.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from better_compute.api.deps import services_of
from better_compute.domain.kernel.errors import DomainError, Unauthenticated
from better_compute.domain.tenancy.credentials import Principal, bearer_token
from better_compute.service.tenancy import credentials
from better_compute.web import TEMPLATES

Session = tuple[Principal, str]
"""Who is logged in, and the token the cookie keeps."""

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

ENV = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]))


def csrf_for(token: str) -> str:
    """The form token of a session: a keyed digest of its cookie. Only a page served to the holder
    of the cookie carries it; another site can neither read the cookie nor compute this."""
    return hmac.new(token.encode(), b"better-compute console form", hashlib.sha256).hexdigest()


def render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    context.setdefault("pages", PAGES)
    context.setdefault("who", None)
    html = ENV.get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers=HEADERS)


def same_token(sent: str, expected: str) -> bool:
    """Whether a form's token is the session's, in constant time; any text compares (as bytes)."""
    return hmac.compare_digest(sent.encode("utf-8", "replace"), expected.encode())


def cross_site(request: Request) -> bool:
    """A request another site's page sent: the browser says so (`Sec-Fetch-Site`), or its `Origin`
    is not this server's."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return True
    origin = request.headers.get("origin")
    return origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}"


def fragment(template: str, **context: Any) -> HTMLResponse:
    """A part of a page, as the page's live script fetches it (`?partial=1`)."""
    return HTMLResponse(ENV.get_template(template).render(**context), headers=HEADERS)


def session_of(request: Request) -> Session | None:
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


def who_of(principal: Principal) -> str:
    return "fleet admin" if principal.is_admin else f"tenant {principal.tenant_id}"


def to_login() -> RedirectResponse:
    response = RedirectResponse(f"{PREFIX}/login", status_code=303)
    response.delete_cookie(COOKIE, path=PREFIX)
    return response


async def read_form(request: Request) -> dict[str, str]:
    """A small url-encoded form: its first value per field; an oversized body reads as empty."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return {}
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {k: v[0] for k, v in fields.items() if v}


def render_page(session: Session, name: str, template: str, **context: Any) -> Response:
    """A page for the session the route has checked."""
    principal, token = session
    return render(template, page=name, who=who_of(principal), csrf=csrf_for(token), **context)


def not_found_page(request: Request, error: DomainError) -> Response:
    session = session_of(request)
    who = who_of(session[0]) if session else None
    csrf = csrf_for(session[1]) if session else ""
    return render("error.html", 404, page="", who=who, csrf=csrf, message=error.message)


def install(app: FastAPI) -> None:
    """The console's root, the login form and logging out."""

    @app.get(PREFIX, include_in_schema=False)
    def console_root(request: Request) -> Response:
        target = "fleet" if session_of(request) else "login"
        return RedirectResponse(f"{PREFIX}/{target}", status_code=303)

    @app.get(f"{PREFIX}/login", include_in_schema=False)
    def login_page(request: Request) -> Response:
        if session_of(request) is not None:
            return RedirectResponse(f"{PREFIX}/fleet", status_code=303)
        return render("login.html", page="login")

    @app.post(f"{PREFIX}/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        if cross_site(request):  # another site logging the browser in under a token of its choosing
            return render(
                "login.html", 403, page="login", error="Not logged in: this form is not from this console."
            )
        token = (await read_form(request)).get("token", "").strip()
        try:
            bearer_token(f"Bearer {token}")
            credentials.authenticate(services_of(request).store, token)
        except Unauthenticated as refused:
            return render("login.html", 401, page="login", error=f"Not logged in: {refused.message}.")
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
        session = session_of(request)
        sent = (await read_form(request)).get("csrf", "")
        if session is not None and not same_token(sent, csrf_for(session[1])):
            return render("error.html", 403, page="", message="This form is not from this console.")
        return to_login()
