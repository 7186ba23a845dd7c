"""What a client may send: a request body of bounded size, arriving without long pauses.

Without a cap one anonymous client could make a process buffer a 100 MB body (a route reads its
body before it can tell what is in it), and without a timeout a client that trickles its body, or
stops half-way, holds the request and its connection for as long as it likes. Both are refused
here, before a route runs or as the body arrives, so that every route is covered alike:

- a `Content-Length` over the cap is refused at once, without reading a byte of the body;
- a body without one (chunked), or one that sends more than it declared, is counted as it is
  received and refused as soon as it passes the cap;
- each wait for the next part of a body lasts at most `timeout` seconds;
- a client that disconnects before its body has arrived is one warning line, not a traceback;
- a request in a `Content-Encoding` other than `identity` is refused at once (415): the server
  decodes none, and reading gzip bytes as JSON would only end in a confusing error further on.

Every refusal closes the connection (`Connection: close`), so the rest of a body that was not read
is not read either. The cap is far above any request the API takes: a reservation with its 16
device requests is a few kilobytes.

The limits themselves are settings (`better_compute.settings`: `BC_MAX_BODY_BYTES`,
`BC_TIMEOUT_REQUEST`), handed to `create_app` by the composition root. A path may have a cap of its
own instead (`caps`): `endpoints.invoke` forwards a model's input of up to 6 MiB, whatever the API's
cap is.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from better_compute.wire import codes

if TYPE_CHECKING:
    from starlette.responses import Response

log = logging.getLogger("better_compute.api")

_DISCONNECT: Message = {"type": "http.disconnect"}


def body_too_large(limit: int) -> Response:
    """The refusal of a body over the cap (413)."""
    from better_compute.api.errors import error_response

    return _closing(
        error_response(
            413,
            codes.INVALID_INPUT,
            f"the request body is larger than the limit of {limit} bytes",
            {"limit": limit},
        )
    )


def seconds(value: float) -> str:
    """`1 second`, `30 seconds`, `0.5 seconds`: a timeout as a message names it."""
    return f"{value:g} second" if value == 1 else f"{value:g} seconds"


def body_too_slow(timeout: float) -> Response:
    """The refusal of a body whose next part did not arrive in time (408)."""
    from better_compute.api.errors import error_response

    return _closing(
        error_response(
            408,
            codes.INVALID_INPUT,
            f"the request body stalled: no part of it arrived within {seconds(timeout)}",
            {"timeout": int(timeout) if timeout == int(timeout) else timeout},
        )
    )


def encoding_not_decoded(coding: str) -> Response:
    """The refusal of a body in a content coding the server does not decode (415, RFC 9110 15.5.16),
    with `Accept-Encoding` naming the one it takes (RFC 7694)."""
    from better_compute.api.errors import error_response

    return _closing(
        error_response(
            415,
            codes.INVALID_INPUT,
            f"Content-Encoding {coding} is not decoded by this server; send the body unencoded (identity)",
            {"contentEncoding": coding, "accepted": ["identity"]},
            headers={"Accept-Encoding": "identity"},
        )
    )


def _closing(response: Response) -> Response:
    response.headers["connection"] = "close"
    return response


def _declared_body(scope: Scope) -> tuple[int | None, bool, str | None]:
    """The request's `Content-Length` (None when absent or not a number), whether a body follows,
    and its `Content-Encoding` when that is anything but `identity` (None: the body is as sent)."""
    length: int | None = None
    chunked = False
    codings: list[str] = []
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                length = None
        elif name == b"transfer-encoding":
            chunked = True
        elif name == b"content-encoding":
            codings.append(value.decode("latin-1").strip())
    encoded = ", ".join(c for c in codings if c)
    if all(c.strip().lower() in ("", "identity") for c in encoded.split(",")):
        encoded = ""
    return length, chunked or bool(length), encoded or None


def _where(scope: Scope) -> str:
    """`METHOD /path` for a log line, with anything unprintable escaped (the path is the client's)."""
    raw = scope.get("raw_path")
    path = raw.decode("ascii", "backslashreplace") if isinstance(raw, bytes) else str(scope.get("path"))
    return f"{scope.get('method')} {path.encode('unicode_escape').decode('ascii')}"


class BodyLimits:
    """Pure ASGI middleware: a request without a body costs it one scan of the headers."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        timeout: float,
        caps: Sequence[tuple[re.Pattern[str], int]] = (),
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.caps = tuple(caps)
        """(path pattern, cap): a path that matches one takes its cap instead of `max_bytes`."""

    def cap_of(self, path: str) -> int:
        for pattern, cap in self.caps:
            if pattern.fullmatch(path):
                return cap
        return self.max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length, has_body, encoded = _declared_body(scope)
        if encoded is not None:
            await encoding_not_decoded(encoded)(scope, receive, send)
            return
        if not has_body:
            await self.app(scope, receive, send)
            return
        cap = self.cap_of(scope["path"]) if self.caps else self.max_bytes
        if length is not None and length > cap:
            await body_too_large(cap)(scope, receive, send)
            return
        reading = _BodyReading(self, scope, receive, send, cap)
        try:
            await self.app(scope, reading.receive, reading.send)
        except ClientDisconnect:
            # The client is gone: there is nobody to answer. A refusal of ours also ends so.
            if not reading.cut:
                reading.note_disconnect()


class _BodyReading:
    """One request's body as the app reads it: counted, timed, and refused when it breaks a limit."""

    __slots__ = (
        "body_done",
        "cap",
        "cut",
        "limits",
        "logged",
        "muted",
        "raw_receive",
        "raw_send",
        "received",
        "scope",
        "started",
    )

    def __init__(self, limits: BodyLimits, scope: Scope, receive: Receive, send: Send, cap: int) -> None:
        self.limits = limits
        self.cap = cap
        self.scope = scope
        self.raw_receive = receive
        self.raw_send = send
        self.body_done = False
        self.received = 0
        self.started = False
        self.cut = False
        """No more of the body is read (it broke a limit, or the client left): the app is told the
        client is gone."""
        self.muted = False
        """Whatever the app answers is dropped: a refusal went in its place, or the client is gone."""
        self.logged = False

    async def receive(self) -> Message:
        if self.cut:
            return _DISCONNECT
        if self.body_done:
            # After the body only a disconnect can come, and waiting for it is the app's choice.
            return await self.raw_receive()
        try:
            async with asyncio.timeout(self.limits.timeout):
                message = await self.raw_receive()
        except TimeoutError:
            await self._refuse(body_too_slow(self.limits.timeout))
            return _DISCONNECT
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.cap:
                await self._refuse(body_too_large(self.cap))
                return _DISCONNECT
            if not message.get("more_body", False):
                self.body_done = True
        elif message["type"] == "http.disconnect":
            self.note_disconnect()
            self.cut = self.muted = True
        return message

    async def send(self, message: Message) -> None:
        if self.muted:
            return
        if message["type"] == "http.response.start":
            self.started = True
            if not self.body_done:
                # Answered before the body was read (a 401, say): close rather than drain the rest.
                message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
        await self.raw_send(message)

    async def _refuse(self, response: Response) -> None:
        """Answer with `response` in the app's place, unless the app has begun its own answer."""
        self.cut = True
        if not self.started:
            self.started = True
            self.muted = True
            await response(self.scope, self.raw_receive, self.raw_send)

    def note_disconnect(self) -> None:
        if not self.logged and not self.body_done:
            self.logged = True
            log.warning("client disconnected before its request body was read: %s", _where(self.scope))


__all__ = [
    "BodyLimits",
    "body_too_large",
    "body_too_slow",
    "encoding_not_decoded",
    "seconds",
]
