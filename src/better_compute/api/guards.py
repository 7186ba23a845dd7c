"""Requests no store can answer are refused before any route runs.

PostgreSQL cannot hold or compare text containing NUL, so a `%00` in a path or query would surface as
a driver error deep in a use case. Refusing it here keeps every such request a clear INVALID_INPUT.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response

from better_compute.api.errors import error_response


def install(app: FastAPI) -> None:
    @app.middleware("http")
    async def _reject_nul(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if "\x00" in request.url.path or b"%00" in request.scope.get("query_string", b""):
            return error_response(
                400, "INVALID_INPUT", "the request's path or query contains a NUL character"
            )
        return await call_next(request)
