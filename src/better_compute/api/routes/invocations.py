"""`endpoints.invoke`: a request for a component, forwarded to one of its ready copies and its answer
relayed back as it arrives (docs/endpoints.md#invoking-an-endpoint).

The route is `async` and does not hop to a worker thread: the caller's token and the routing table
are each one short indexed read on the event loop (as every route's authentication is), and the
forwarding is one shared `httpx.AsyncClient` whose connection pool (256 connections, 128 kept alive)
the app's lifespan opens and closes. An app driven without its lifespan (a test's `TestClient` used
without `with`) opens a client per request instead, since a pooled connection belongs to the event
loop that opened it.

Only these request headers go to the model server: `Content-Type` and `Accept`. The caller's token
never does. Only these come back: `Content-Type`, `Content-Length` and `Content-Encoding` (the body is
relayed as the model server sent it), with `BC-Invoked-Copy` naming the copy that answered.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Annotated

import httpx
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

_PASSED_ON = ("content-type", "accept")
_PASSED_BACK = ("content-type", "content-length", "content-encoding")

router = APIRouter(prefix="/v1", tags=["endpoints"])


def new_upstream() -> httpx.AsyncClient:
    """The client requests go to model servers through: pooled for 64+ concurrent callers, no proxy
    from the environment, and `INVOKE_TIMEOUT_S` to answer."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(INVOKE_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
        limits=httpx.Limits(max_connections=256, max_keepalive_connections=128),
        trust_env=False,
        follow_redirects=False,
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
        shared: httpx.AsyncClient | None = getattr(request.app.state, "upstream", None)
        client = shared if shared is not None else await stack.enter_async_context(new_upstream())
        answer, copy = await _forward(client, services.invocations, route, body, headers, stack)
        return Relayed(answer, copy, stack.aclose)
    except BaseException:
        await stack.aclose()
        raise


async def _forward(
    client: httpx.AsyncClient,
    balancer: invocations.Balancer,
    route: invocations.Route,
    body: bytes,
    headers: dict[str, str],
    stack: AsyncExitStack,
) -> tuple[httpx.Response, ReadyCopy]:
    """The answer's head from the first copy in the balancer's order, or from the next one when the
    first refuses the connection (503 when both do, or on any other failure: a request that may have
    reached a model server is not sent again). The copy stays counted until `stack` closes."""
    tried: list[int] = []
    for copy in balancer.order(route.copies)[:2]:
        tried.append(copy.copy)
        release = balancer.take(copy)
        url = f"http://{copy.address}{route.path}"
        try:
            answer = await client.send(
                client.build_request("POST", url, content=body, headers=headers), stream=True
            )
        except (httpx.ConnectError, httpx.ConnectTimeout):
            release()
            log.warning("copy %s:%d at %s refused the connection", copy.component, copy.copy, copy.address)
            continue
        except httpx.TimeoutException as exc:
            release()
            why = f"copy {copy.copy} not answering within {seconds(INVOKE_TIMEOUT_S)}"
            raise NoReadyCopy(route.endpoint, route.component, why) from exc
        except httpx.TransportError as exc:
            release()
            why = f"copy {copy.copy} failing ({type(exc).__name__})"
            raise NoReadyCopy(route.endpoint, route.component, why) from exc
        except BaseException:
            release()
            raise
        stack.callback(release)
        stack.push_async_callback(answer.aclose)
        return answer, copy
    listed = ", ".join(str(c) for c in tried)
    raise NoReadyCopy(
        route.endpoint, route.component, f"no ready copy taking connections (copy {listed} refused)"
    )


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

    def __init__(self, answer: httpx.Response, copy: ReadyCopy, done: Callable[[], Awaitable[None]]) -> None:
        super().__init__(status_code=answer.status_code)
        self.answer = answer
        self.done = done
        kept = [
            (k.encode("latin-1"), v.encode("latin-1")) for k in _PASSED_BACK if (v := answer.headers.get(k))
        ]
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


async def _chunks(answer: httpx.Response) -> AsyncIterator[bytes]:
    """The answer's body as it arrives; a model server failing half-way ends it (logged), and the
    caller sees a body cut short (the status has been sent)."""
    try:
        async for chunk in answer.aiter_raw():
            if chunk:
                yield chunk
    except httpx.HTTPError as exc:
        log.warning("the model server's answer broke off: %s", type(exc).__name__)
        raise


__all__ = ["INVOKE_PATH", "Relayed", "new_upstream", "router"]
