"""Requests no store can answer are refused before any route runs.

PostgreSQL cannot hold or compare text containing NUL, so a `%00` in a path or query would surface as
a driver error deep in a use case. Refusing it here keeps every such request a clear INVALID_INPUT.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from better_compute.api.errors import error_response
from better_compute.wire import codes


class RejectNul:
    """Pure ASGI middleware: it costs nothing on requests it lets through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (
            "\x00" in scope.get("path", "") or b"%00" in scope.get("query_string", b"")
        ):
            response = error_response(
                400, codes.INVALID_INPUT, "the request's path or query contains a NUL character"
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def install(app: FastAPI) -> None:
    app.add_middleware(RejectNul)


__all__ = ["RejectNul", "install"]
