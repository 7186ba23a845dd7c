"""Every refusal becomes `{"error": {"code", "message", "details"}}`, mapped here and only here.

QUOTA_EXCEEDED is 409 (the request conflicts with the tenant's quota state; retrying later does not
help by itself, unlike a rate limit). UNAVAILABLE is 503 with `Retry-After`: the database cannot be
reached or written, nothing was applied, and the same request may succeed later. It is logged by the
store once when the outage starts and once when it ends, never per request.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from better_compute.api import operations
from better_compute.api.version import VERSION_HEADERS
from better_compute.domain.kernel import errors
from better_compute.wire import codes

log = logging.getLogger("better_compute.api")

STATUS: dict[str, int] = {
    codes.INVALID_INPUT: 400,
    codes.UNAUTHENTICATED: 401,
    codes.FORBIDDEN: 403,
    codes.NOT_FOUND: 404,
    codes.METHOD_NOT_ALLOWED: 405,
    codes.INVALID_STATE: 409,
    codes.CONFLICT: 409,
    codes.QUOTA_EXCEEDED: 409,
    codes.INSUFFICIENT_CAPACITY: 409,
    codes.INTERNAL: 500,
    codes.UNAVAILABLE: 503,
}
"""The HTTP status of every code (`wire.codes.SERVER_CODES`), domain errors' first of all."""

_HTTP_CODES = {
    400: codes.INVALID_INPUT,
    401: codes.UNAUTHENTICATED,
    403: codes.FORBIDDEN,
    404: codes.NOT_FOUND,
    405: codes.METHOD_NOT_ALLOWED,
}
"""Refusals the router makes before any route runs (no such path, a verb the path does not take)."""


def code_of(exc: BaseException) -> str:
    """The error code the handlers below answer `exc` with (for counting refusals by code)."""
    if isinstance(exc, errors.DomainError):
        return exc.code
    if isinstance(exc, RequestValidationError):
        return codes.INVALID_INPUT
    if isinstance(exc, StarletteHTTPException):
        return _HTTP_CODES.get(exc.status_code, codes.INVALID_INPUT)
    return codes.INTERNAL


def error_response(
    status: int,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return JSONResponse(
        status_code=status,
        content={"error": {"code": code, "message": message, "details": details or {}}},
        headers=headers,
    )


def _location(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else (f".{p}" if out else p)
    return out or "body"


def _allowed(path: str, exc: StarletteHTTPException) -> str:
    """The verbs `path` takes, for a 405's `Allow` (as HTTP asks): the method table's, and those of the
    route that refused (Starlette names only that one, and the API has one route per verb)."""
    verbs = set(operations.verbs_of(path))
    verbs.update(v.strip() for v in (exc.headers or {}).get("Allow", "").split(",") if v.strip())
    return ", ".join(sorted(verbs))


def install(app: FastAPI) -> None:
    @app.exception_handler(errors.DomainError)
    async def _domain(_: Request, exc: errors.DomainError) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, errors.Unavailable) else None
        return error_response(STATUS.get(exc.code, 400), exc.code, exc.message, exc.details, headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = exc.errors()
        first = problems[0] if problems else {"loc": (), "msg": "invalid request"}
        where = _location(tuple(first.get("loc", ())))
        message = f"{where}: {first.get('msg', 'invalid')}"
        details = {
            "errors": [
                {"field": _location(tuple(p.get("loc", ()))), "message": str(p.get("msg", ""))}
                for p in problems
            ]
        }
        return error_response(400, codes.INVALID_INPUT, message, details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, codes.INVALID_INPUT)
        status = exc.status_code if exc.status_code in _HTTP_CODES else 400
        headers = {"Allow": _allowed(request.url.path, exc)} if status == 405 else None
        return error_response(status, code, str(exc.detail), headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error", exc_info=exc)
        # Sent from outside every middleware (Starlette's last resort), so it adds the version itself.
        return error_response(
            500, codes.INTERNAL, "internal error; the request was not applied", headers=VERSION_HEADERS
        )
