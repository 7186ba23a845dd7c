"""Every answer names the contract it speaks: `BC-API-Version: 1` (`wire.API_VERSION`).

A pure ASGI middleware, outermost, so that answers made before any route runs (a 404, a 405, a body
over the cap) carry it too. The one answer it cannot see is the 500 of an unexpected error, which
Starlette sends from outside every middleware: `api/errors.py` gives that one the header itself.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from better_compute.wire import API_VERSION, API_VERSION_HEADER

VERSION_HEADERS = {API_VERSION_HEADER: API_VERSION}
"""The header as a response's `headers` argument takes it."""

_HEADER = (API_VERSION_HEADER.lower().encode("latin-1"), API_VERSION.encode("latin-1"))


class ApiVersionHeader:
    """Adds the version header to the start of every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), _HEADER]
            await send(message)

        await self.app(scope, receive, stamped)


def install(app: FastAPI) -> None:
    """Call after every other middleware is added, so that this one is outermost."""
    app.add_middleware(ApiVersionHeader)


__all__ = ["VERSION_HEADERS", "ApiVersionHeader", "install"]
