"""`endpoints.invoke`: a request for a component, forwarded to one of its ready copies and its answer
relayed back as it arrives (docs/endpoints.md#invoking-an-endpoint).

The route is `async` and does not hop to a worker thread: the caller's token and the routing table
are each one short indexed read on the event loop (as every route's authentication is), and the
forwarding is one shared `aiohttp.ClientSession` whose connection pool (256 connections) the app's
lifespan opens and closes. aiohttp rather than httpx: at 64 concurrent requests httpx's pool spends
more time choosing a connection than the whole request takes elsewhere (about 300 requests a second
against aiohttp's 7,000 on this project's 2-core test machine; `bench/endpoints.py` measures the
path). An app driven without its lifespan (a test's `TestClient` used without `with`) opens a
session per request instead, since a pooled connection belongs to the event loop that opened it.

Only these request headers go to the model server: `Content-Type` and `Accept`. The caller's token
never does. Only these come back: `Content-Type`, `Content-Length` and `Content-Encoding` (the body is
relayed as the model server sent it), with `BC-Invoked-Copy` naming the copy that answered.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Annotated

import aiohttp
from fastapi import APIRouter, Header, Query, Request, Response
from starlette.types import Receive, Scope, Send

from better_compute.api.auth import PrincipalDep
from better_compute.api.deps import services_of
from better_compute.api.limits import seconds
from better_compute.domain.endpoints.copy_states import ReadyCopy
from better_compute.domain.endpoints.invoke_routing import (
    INVOKE_TIMEOUT_S,
    MAX_INVOKE_BODY_BYTES,
    NoReadyCopy,
)
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.service.endpoints import invocations
from better_compute.wire.invocations import COMPONENT_HEADER, COMPONENT_QUERY, INVOKED_COPY_HEADER

log = logging.getLogger("better_compute.api.invoke")

INVOKE_PATH = re.compile(r"/v1/endpoints/[^/]+/invoke")
"""The route's path, for the body cap of its own (`api.limits.BodyLimits`)."""

CONNECT_TIMEOUT_S = 2.0
"""How long a copy has to accept the connection before the next ready copy is tried."""

KEEPALIVE_S = 2.0
"""How long an idle connection to a model server is kept for the next request: shorter than the usual
servers' own keep-alive (uvicorn 5 s, gunicorn 2 s and up), so that we close an idle connection before
the model server does and a request is never sent down one it is closing."""

_PASSED_ON = ("content-type", "accept")
_PASSED_BACK = ("content-type", "content-length", "content-encoding")

router = APIRouter(prefix="/v1", tags=["endpoints"])


UPSTREAM_CONNECTIONS = 2048
"""Connections to model servers a server process holds at most, all copies together."""

UPSTREAM_PER_COPY = 128
"""Connections to one copy's address at most: a copy whose model server answers slowly (long
generations) holds at most these, so it never takes the connections other copies' requests (other
endpoints', other tenants') need."""

POOL_WAIT_S = 10.0
"""How long a request waits for one of its copy's connections (and for the connection to be made)
before the next ready copy is tried; 503 when none takes it."""


def new_upstream() -> aiohttp.ClientSession:
    """The session requests go to model servers through: pooled for 64+ concurrent callers, bounded
    per copy (`UPSTREAM_PER_COPY`), no proxy from the environment, no cookie jar (a model server's
    `Set-Cookie` must never reach the next caller, nor another tenant's model server on the same
    host), bodies relayed as sent (not decompressed), `CONNECT_TIMEOUT_S` to connect, `POOL_WAIT_S`
    to get a connection at all, and `INVOKE_TIMEOUT_S` for each read of the answer."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=UPSTREAM_CONNECTIONS, limit_per_host=UPSTREAM_PER_COPY, keepalive_timeout=KEEPALIVE_S
        ),
        timeout=aiohttp.ClientTimeout(
            total=None, connect=POOL_WAIT_S, sock_connect=CONNECT_TIMEOUT_S, sock_read=INVOKE_TIMEOUT_S
        ),
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        trust_env=False,
        skip_auto_headers=("User-Agent", "Content-Type"),
    )


_BYTES = {"schema": {"type": "string", "format": "binary", "maxLength": MAX_INVOKE_BODY_BYTES}}
_RELAYED = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}, "*/*": {}}
"""Any content type goes and comes back as it is; `application/octet-stream` is listed first so that a
client generator that cannot take `*/*` still makes the call (it sends and reads bytes)."""

_BODY = {
    "required": False,
    "content": {"application/octet-stream": _BYTES, "*/*": _BYTES},
    "description": f"The model's input as raw bytes, up to {MAX_INVOKE_BODY_BYTES} bytes (6 MiB); its"
    " Content-Type is passed to the model server.",
}


@router.post(
    "/endpoints/{name}/invoke",
    response_class=Response,
    openapi_extra={"requestBody": _BODY},
    responses={
        200: {"description": "The model server's answer, as it sent it.", "content": _RELAYED},
        429: {
            "description": "The model server's own refusal (its rate limit), relayed as it sent it:"
            " any status a model server answers is relayed so, and this API sets no rate limit.",
            "content": _RELAYED,
        },
    },
)
async def invoke(
    name: str,
    request: Request,
    principal: PrincipalDep,
    header: Annotated[str | None, Header(alias=COMPONENT_HEADER)] = None,
    component: Annotated[str | None, Query(alias=COMPONENT_QUERY, max_length=63)] = None,
) -> Response:
    named = _component(header, component)
    services = services_of(request)
    route = invocations.route(services.store, principal, name, named, services.clock())
    body = await request.body()
    if len(body) > MAX_INVOKE_BODY_BYTES:  # the cap in front of the app already refuses these
        raise InvalidInput(
            f"the request body is larger than the limit of {MAX_INVOKE_BODY_BYTES} bytes",
            {"limit": MAX_INVOKE_BODY_BYTES},
        )
    headers = {k: v for k in _PASSED_ON if (v := request.headers.get(k)) is not None}
    stack = AsyncExitStack()
    try:
        shared: aiohttp.ClientSession | None = getattr(request.app.state, "upstream", None)
        client = shared if shared is not None else await stack.enter_async_context(new_upstream())
        answer, copy = await _forward(client, services.invocations, route, body, headers, stack)
        return Relayed(answer, copy, stack.aclose)
    except BaseException:
        await stack.aclose()
        raise


async def _forward(
    client: aiohttp.ClientSession,
    balancer: invocations.Balancer,
    route: invocations.Route,
    body: bytes,
    headers: dict[str, str],
    stack: AsyncExitStack,
) -> tuple[aiohttp.ClientResponse, ReadyCopy]:
    """The answer's head from the first copy in the balancer's order, or from the next one when the
    first refuses the connection (503 when both do, or on any other failure: a request that may have
    reached a model server is not sent again). The copy stays counted until `stack` closes."""
    tried: list[int] = []
    for copy in balancer.order(route.copies)[:2]:
        tried.append(copy.copy)
        release = balancer.take(copy)
        url = f"http://{copy.address}{route.path}"
        try:
            answer = await client.request(
                "POST", url, data=_payload(body), headers=headers, allow_redirects=False
            )
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError):
            release()
            log.warning(
                "copy %s:%d at %s refused the connection or had none free in time",
                copy.component,
                copy.copy,
                copy.address,
            )
            continue
        except TimeoutError as exc:
            release()
            why = f"copy {copy.copy} not answering within {seconds(INVOKE_TIMEOUT_S)}"
            raise NoReadyCopy(route.endpoint, route.component, why) from exc
        except aiohttp.ClientError as exc:
            release()
            why = f"copy {copy.copy} failing ({type(exc).__name__})"
            raise NoReadyCopy(route.endpoint, route.component, why) from exc
        except BaseException:
            release()
            raise
        stack.callback(release)
        stack.callback(_finish, answer)
        return answer, copy
    listed = ", ".join(str(c) for c in tried)
    raise NoReadyCopy(
        route.endpoint,
        route.component,
        f"no ready copy taking connections (copy {listed} refused, or had none free within"
        f" {seconds(POOL_WAIT_S)})",
    )


def _payload(body: bytes) -> bytes | io.BytesIO:
    """The body as aiohttp sends it without a warning: a large one from a file-like object, written in
    chunks (it has a Content-Length either way)."""
    return body if len(body) <= _LARGE_BODY else io.BytesIO(body)


_LARGE_BODY = 1024 * 1024


def _finish(answer: aiohttp.ClientResponse) -> None:
    """Give the answer's connection back to the pool when its body was read to the end, else close
    it (the caller left half-way, the model server broke off): a connection with an unread rest of a
    body must not carry the next request."""
    if answer.content.at_eof():
        answer.release()
    else:
        answer.close()


def _component(header: str | None, query: str | None) -> str:
    """The component the request names, by header or query parameter (INVALID_INPUT: neither, or two
    different ones)."""
    if header and query and header != query:
        raise InvalidInput(
            f"the {COMPONENT_HEADER} header ({header[:63]}) and {COMPONENT_QUERY} ({query}) name different"
            " components",
            {"field": COMPONENT_QUERY},
        )
    named = header or query
    if not named:
        raise InvalidInput(
            f"name the inference component: the {COMPONENT_HEADER} header or the {COMPONENT_QUERY} query"
            " parameter",
            {"field": COMPONENT_QUERY},
        )
    if len(named) > 63:
        raise InvalidInput("the component's name is longer than 63 characters", {"field": COMPONENT_QUERY})
    return named


class Relayed(Response):
    """The model server's answer, relayed chunk by chunk as it arrives; `done` runs however it ends
    (the caller gone, the model server failing half-way), releasing the copy's count and connection."""

    def __init__(
        self, answer: aiohttp.ClientResponse, copy: ReadyCopy, done: Callable[[], Awaitable[None]]
    ) -> None:
        super().__init__(status_code=answer.status)
        self.answer = answer
        self.done = done
        # The header bytes as the model server sent them (a value need not be Latin-1 text).
        kept = [(k.lower(), v) for k, v in answer.raw_headers if k.lower().decode("latin-1") in _PASSED_BACK]
        invoked = f"{copy.component}:{copy.copy}".encode("latin-1")
        self.raw_headers = [*kept, (INVOKED_COPY_HEADER.lower().encode("latin-1"), invoked)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send(
                {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            )
            async for chunk in _chunks(self.answer):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self.done()


async def _chunks(answer: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The answer's body as it arrives; a model server failing half-way ends it (logged), and the
    caller sees a body cut short (the status has been sent)."""
    try:
        async for chunk in answer.content.iter_any():
            if chunk:
                yield chunk
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("the model server's answer broke off: %s", type(exc).__name__)
        raise


__all__ = ["INVOKE_PATH", "Relayed", "new_upstream", "router"]
