"""uvicorn's HTTP protocol with the two connection timeouts it lacks.

uvicorn closes a keep-alive connection left idle after a response (`timeout_keep_alive`), but it
arms that timer only after a response: a connection that never sends a byte, or sends half a
request head and stops, stays open for good, and a few hundred of them hold a server's sockets.
This subclass arms the idle timer as soon as a connection opens too, and gives every request head
(request line and headers) `timeout_request` seconds from the moment the connection is ready for
it; past that the client gets a 408 and the connection is closed. Slow bodies are the app's to time
(`api/limits.py`), since only the app knows when it waits for one.

A connection whose idle timer comes due while its next request is already in the socket is kept: a
busy event loop (uvloop runs due timers before it polls the sockets) can reach the timer seconds after
the request arrived, and closing then drops a request the client had every right to send, which the
client sees as "Server disconnected without sending a response". The request is read on the loop's
next pass, and its head is still timed.

It relies on uvicorn's `HttpToolsProtocol` internals (its parser callbacks and keep-alive timer),
which is why pyproject.toml bounds uvicorn's version; tests/e2e/test_connections.py checks it
against a real server.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import json
import logging
import termios
from functools import partial
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from better_compute.api.limits import seconds
from better_compute.wire import API_VERSION, API_VERSION_HEADER, codes

log = logging.getLogger("better_compute.server")


class TimedHttpProtocol(HttpToolsProtocol):
    """`HttpToolsProtocol` that closes idle connections from the start and times request heads."""

    def __init__(self, *args: Any, timeout_request: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timeout_request = timeout_request
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_begun = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        self._head_begun = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._disarm_head_timer()
        self._head_begun = False
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:
            # uvicorn armed its idle timer: the connection now waits for its next request's head.
            self._arm_head_timer()

    def timeout_keep_alive_handler(self) -> None:
        if self._request_waiting():
            # Not idle: the next request arrived before the loop got to this timer (see the module).
            self.timeout_keep_alive_task = None
            return
        super().timeout_keep_alive_handler()

    def _request_waiting(self) -> bool:
        """Whether bytes the client sent wait in the socket, not read yet (FIONREAD)."""
        sock = self.transport.get_extra_info("socket")
        if sock is None or self.transport.is_closing():
            return False
        pending = array.array("i", [0])
        try:
            fcntl.ioctl(sock.fileno(), termios.FIONREAD, pending)
        except OSError:
            return False
        return pending[0] > 0

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.timeout_request, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_begun:
            client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            log.warning(
                "closed the connection of %s: its request head did not arrive within %s",
                client,
                seconds(self.timeout_request),
            )
            self.transport.write(self._head_timeout_answer())
        self.transport.close()

    def _head_timeout_answer(self) -> bytes:
        """A 408 in the API's error shape, closing the connection."""
        body = json.dumps(
            {
                "error": {
                    "code": codes.INVALID_INPUT,
                    "message": f"the request head did not arrive within {seconds(self.timeout_request)}",
                    "details": {"timeout": self.timeout_request},
                }
            }
        ).encode()
        head = [STATUS_LINE[408]]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        head += [
            API_VERSION_HEADER.encode("latin-1") + b": " + API_VERSION.encode("latin-1") + b"\r\n",
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        return b"".join(head) + body


def timed_protocol(timeout_request: float) -> type[asyncio.Protocol]:
    """The `http=` protocol for uvicorn: `TimedHttpProtocol` with its head timeout bound.

    uvicorn calls it as it calls a protocol class, and a `partial` of a module-level class is
    pickled by reference, so it reaches `serve --workers N`'s worker processes as it is.
    """
    return cast("type[asyncio.Protocol]", partial(TimedHttpProtocol, timeout_request=timeout_request))


__all__ = ["TimedHttpProtocol", "timed_protocol"]
