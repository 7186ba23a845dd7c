"""Every refusal becomes `{"error": {"code", "message", "details"}}`, mapped here and only here.

QUOTA_EXCEEDED is 409 (the request conflicts with the tenant's quota state; retrying later does not
help by itself, unlike a rate limit).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from better_compute.api.version import VERSION_HEADERS
from better_compute.domain import errors

log = logging.getLogger("better_compute.api")

STATUS: dict[str, int] = {
    errors.InvalidInput.code: 400,
    errors.Unauthenticated.code: 401,
    errors.Forbidden.code: 403,
    errors.NotFound.code: 404,
    errors.InvalidState.code: 409,
    errors.Conflict.code: 409,
    errors.QuotaExceeded.code: 409,
    errors.InsufficientCapacity.code: 409,
}

_HTTP_CODES = {
    400: "INVALID_INPUT",
    401: "UNAUTHENTICATED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "NOT_FOUND",
}


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


def install(app: FastAPI) -> None:
    @app.exception_handler(errors.DomainError)
    async def _domain(_: Request, exc: errors.DomainError) -> JSONResponse:
        return error_response(STATUS.get(exc.code, 400), exc.code, exc.message, exc.details)

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
        return error_response(400, "INVALID_INPUT", message, details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "INVALID_INPUT")
        status = exc.status_code if exc.status_code in _HTTP_CODES else 400
        return error_response(status, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        # Sent from outside every middleware (Starlette's last resort), so it adds the version itself.
        return error_response(
            500, "INTERNAL", "internal error; the request was not applied", headers=VERSION_HEADERS
        )
